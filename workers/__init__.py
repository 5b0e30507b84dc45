"""Processes and wiring: the CLI, the worker, the controller and settings."""
