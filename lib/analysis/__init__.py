"""Measurements that take a model apart: a construction by hand, exact logit decompositions, the
attention step's margins, the MLP's error budget, chapter 9's bounds and estimators, and chapter 3's probes of the models."""

from . import construct, decompose, step3, margins, k_noise, mlp_budget, lowerbound, model_probes  # noqa: F401
