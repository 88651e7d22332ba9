"""Experiments over seeds and grids: one run, the crash-safe store, critical sample sizes, sweeps,
the capacities of linear memories."""

from . import experiment, store, capacity, sweep, memory_capacity  # noqa: F401
