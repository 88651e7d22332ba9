"""Factual recall with subjects and relations (chapter 11), after Nichani, Lee and Bietti (ICLR 2025).

One module per part of the task; every name is re-exported here, so `lib.factual.train_facts` and
`from lib.factual import X` work:
  task      the task (their `FactRecall`): subjects, relations, the fact table, the sampler  [11]
  models    the models: `FactTransformer` (one layer, H heads, MLP), `LinearAttention`;     [11]
            `param_counts`
  training  online Adam / SGD with logged metrics (`train_facts`, `FactHistory`, `plateau`) [11]
  stacked   many models trained as one (`train_stacked`, `StackedFacts`)                    [11]
  capacity  the smallest model reaching a threshold (`smallest_model`; many searches at once:  [11]
            `smallest_models`), trained points kept in a `FactStore`; chapter 11's whole grid of
            one draw at once (`capacity_grid`, its jobs `capacity_grid_jobs`)
  reference their sequential-learning run at their settings (`nichani_sequential_run`) and   [11]
            the stored run of their code (`load_nichani_reference`), the book's stored runs
            (`load_nichani_book_runs`)
Each imports only those above it in this list.
"""

from __future__ import annotations

from ..core.task import SAMPLE_BLOCK            # re-exported: lib.factual.SAMPLE_BLOCK, as before
from .task import (FactBatch, FactTask, TABLES, fact_table, relation_only, relation_only_scores, sample,
                   zipf_weights)
from .models import (FACT_EMBEDDINGS, FactModelConfig, FactTransformer, LinearAttention, VALUES, block_param_counts,
                     embeddings, param_counts)
from .training import FactHistory, FACT_OPTIMIZERS, SCHEDULES, FactTrainConfig, metrics, plateau, train_facts
from .stacked import QUERY_ROUTE_DH, ROUTES as ATTENTION_ROUTES, BatchCache, StackedFacts, attention_route, stack_key, stackable, train_stacked
from .capacity import (BLOCKS, CAPACITY_GRID, CAPACITY_STORE, DIRECT_GRID, budget_effect, capacity_grid, capacity_grid_jobs, direct_search, noise_point, FactStore, POINT_KEY, POINT_RESULT, block_config, grid_block_params,
                       grid_model, grid_search, point_key, route_code, TRAIN_ROUTES, smallest_model, smallest_models, trained_point,
                       trained_points)
from .reference import (NICHANI_RUN, NICHANI_TASK, count_logits, load_nichani_book_runs, load_nichani_reference,
                        nichani_sequential_run, nichani_task, sample_counts, sequence_counts)
