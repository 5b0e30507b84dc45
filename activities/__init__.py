"""Thin I/O adapters run as Temporal activities: Azure, Kubernetes, and planning on a snapshot."""
