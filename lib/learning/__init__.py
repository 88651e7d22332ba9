"""The three steps as a schedule on either route, evaluation on fresh samples, multi-step training."""

from . import schedule, evaluate, trainer  # noqa: F401
