"""The objects the book defines, written as it writes them: the task, random embeddings, the two
models, associative memories, gradients on the direct route, the three steps' step sizes (chapters 1-3)."""

from . import featuremaps, config, seed, search, grid, optim, embeddings, task, models, memory, gradients, steps  # noqa: F401
