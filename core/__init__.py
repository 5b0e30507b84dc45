"""Pure, deterministic domain logic: API models, quantities, requirements, instance types, scheduling.

Nothing here does I/O, reads the clock or draws unseeded randomness; decisions come back with reasons.
"""
