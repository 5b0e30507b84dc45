"""The repack's default settings, in a module of their own with no imports: the planner's options
(`core.disruption.options`), the workflows' settings (`core.messages`) and the processes' settings
(`workers.settings`) all read them, and the last two are imported inside the workflow sandbox, where the planner's
modules (numpy, HiGHS) must not be."""

DEFAULT_MIN_SAVINGS_MICROS = 20_000
"""A repack's default minimum saving: $0.02 per hour (about $15 a month) per command; see the README."""
DEFAULT_MIN_SAVINGS_PERCENT = 5.0
"""A repack's default minimum saving as a share of the price of the nodes a command retires; see the README."""
DEFAULT_MAX_PODS_MOVED = 50
"""A repack's default cap on the pods one command evicts; see the README."""
DEFAULT_DEADLINE_SECONDS = 3.0
"""How long a plan's repack may search by default, counted from the plan's start; see the README."""
