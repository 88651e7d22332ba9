"""Closed-form predictions and fits that the chapters compare with measurements.

Everything here is the book's own derivation unless a docstring cites a paper. One module per chapter;
every name is re-exported here, so `lib.theory.capacity_law` and `from lib.theory import X` work:
  fits                 power-law fits, the constant of a law, Student-t intervals, parameter counts  [2, 3, 7+]
  ch02_interference    inner-product moments, coherence, the Hebbian memory's moments and capacity  [1-3]
  ch04_value_step      step 1: the one-step memory's logit terms, bag accuracies, coverage           [4]
  ch05_attention_step  step 2: the attention direction, its signal-to-noise ratio and N             [5]
  ch06_refined_memory  step 3: the refined memory's moments, accuracy and N*; orthogonal recall      [6]
  ch07_law             the attention law calibrated at d < V (constants in capacity_calibration.json) [7]
  ch07_derived         the attention requirement derived from k's moments (attention_moments.json)  [7]
  ch07_capacity        the capacity law N* ~ max(N_mem, N_att) (from ch05, ch06 and ch07_derived)   [7]
  ch08_kernels         Hermite coefficients, the MLP kernel, random-feature variances                [8]
  ch08_mlp_memory      the MLP memory's signal and noise terms, predicted accuracy, capacity, width, N* [8]
Within the package, ch07_capacity imports ch05_attention_step, ch06_refined_memory, ch07_derived and
ch07_law, ch07_derived imports ch04_value_step, ch05_attention_step, ch07_law and fits, and
ch08_mlp_memory imports ch08_kernels; no module imports one that imports it back.
"""

from __future__ import annotations

from .fits import (fit_constant, fit_power_law, fit_power_law_ci, fit_power_law_interval, geometric_interval,
                   param_count, t_interval, t_quantile)
from .ch02_interference import (capacity_from_constant, hebbian_conditional_moments,
                                hebbian_predicted_accuracy, hebbian_predicted_capacity, hebbian_score_moments,
                                inner_product_moments, predicted_coherence, trigger_bias_var)
from .ch04_value_step import (coupon_collector, coverage_mean, coverage_var, step1_bag_accuracy,
                              step1_bag_rule_accuracy, step1_signal_unit, step1_term_moments,
                              step1_trigger_key)
from .ch05_attention_step import (_normal_cdf, attention_snr, attention_snr_fluct, excess_noise, critical_snr, gaussian_attention_accuracy,
                                  imbalance_noise, popularity_variance, population_min_d,
                                  predicted_attention_nstar, self_term_noise_variance, softmax_focus,
                                  trigger_score_scale, trigger_self_bias)
from .ch06_refined_memory import (orthogonal_recall, refined_memory_accuracy, refined_memory_moments,
                                  refined_memory_nstar)
from .ch07_derived import (derived_attention_accuracy, derived_attention_nstar, derived_terms, fit_moment_laws,
                           moment_table)
from .ch07_capacity import CHECKED, attention_nstar, capacity_law, derived_range
from .ch07_law import attention_law, calibration, fit_law, law_features, law_range, law_value
from .ch08_kernels import (hermite_coefficients, mlp_kernel, mlp_kernel_crosstalk, mlp_rf_common,
                           mlp_rf_variance, shifted_kernel_coefficients, sphere_cosine_nodes)
from .ch08_mlp_memory import (_gamma_nodes, coverage_vlog, mlp_noise_terms, mlp_predicted_accuracy,
                              mlp_predicted_capacity, mlp_predicted_min_width, mlp_predicted_nstar,
                              mlp_signal_parts, mlp_signal_quantiles, mlp_signal_variance, mlp_term_moments)
