"""The same computations on token ids: chunked forward passes, count tables and gradients that never
build an (N, L, d) tensor, and the optional fused loops (numba). Tests bind each to the direct route."""

from . import native, tokens, counts, limit  # noqa: F401
