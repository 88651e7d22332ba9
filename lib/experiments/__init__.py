"""Experiments over seeds and grids: one run, the crash-safe store, critical sample sizes, sweeps."""

from . import experiment, store, capacity, sweep  # noqa: F401
