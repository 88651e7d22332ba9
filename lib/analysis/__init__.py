"""Measurements that take a model apart: a construction by hand, exact logit decompositions, the
attention step's margins, the MLP's error budget, and chapter 9's bounds and estimators."""

from . import construct, decompose, step3, margins, k_noise, mlp_budget, lowerbound  # noqa: F401
