"""Evaluation on fresh samples, chunked on token ids (all chapters).

Three accuracies (chapters 1 and 3):
  acc         argmax_k xi_k = y on fresh test samples (the model as trained);
  att_acc     the attention's argmax is the informative position: argmax_t s_t = l;
  oracle_acc  recall with oracle attention: o = v_l, the informative token's value.
The forward pass is `lib.fast.tokens` (scores from the table E W_KQ q, values pooled with
`embedding_bag`), so the test set is never expanded to (N, L, d). Both functions accept the
`Params` of a model or the `ThreeSteps` result that holds them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.config import check_int
from ..core.embeddings import Problem
from ..core.models import Params, check_params, features, hard_attention, model_logits, readout_matrix
from ..core.steps import ThreeSteps
from ..core.task import Batch, check_batch, check_batch_memory, sample_batch
from ..fast.tokens import chunk_size, chunks, forward_chunk, informative_values

N_TEST = 2 ** 13   # the one default number of fresh test samples (library, `lib.run` and the CLI)


@dataclass
class Accuracy:
    acc: float          # test accuracy of the trained model
    att_acc: float      # fraction of samples whose attention argmax is the informative position
    oracle_acc: float   # accuracy when attention is replaced by the oracle o = v_l

    def as_dict(self) -> dict:
        return {"acc": self.acc, "att_acc": self.att_acc, "oracle_acc": self.oracle_acc}


def _params(problem: Problem, params) -> Params:
    if isinstance(params, ThreeSteps):
        params = params.params
    check_params(problem, params)
    return params


def predict(problem: Problem, params: Params | ThreeSteps, batch: Batch) -> torch.Tensor:
    """Predicted labels (N,) of the model on a batch."""
    params = _params(problem, params)
    check_batch(problem, batch)
    w = params.W_KQ @ problem.z_eos
    readout = readout_matrix(problem, params.W_V)
    out = [forward_chunk(problem, params.W_V, w, b, params.hard, readout).logits.argmax(1)
           for b in chunks(batch, chunk_size(problem))]
    return torch.cat(out)


def evaluate(problem: Problem, params: Params | ThreeSteps, n_test: int = N_TEST, seed: int = 0,
             batch: Batch | None = None) -> Accuracy:
    """The three accuracies on `n_test` fresh samples (split "test" of `seed`) or on `batch`."""
    params = _params(problem, params)
    if batch is None:
        check_batch_memory(problem.cfg, check_int("n_test", n_test, 1), "n_test")
        batch = sample_batch(problem, n_test, seed, split="test")
    check_batch(problem, batch)
    w = params.W_KQ @ problem.z_eos
    readout = readout_matrix(problem, params.W_V)
    hits = torch.zeros(3, dtype=torch.long)
    for b in chunks(batch, chunk_size(problem)):
        f = forward_chunk(problem, params.W_V, w, b, params.hard, readout)
        hits[0] += int((f.logits.argmax(1) == b.labels).sum())
        hits[1] += int((hard_attention(f.scores) == b.pos).sum())
        hits[2] += int((model_logits(problem, params.W_V, features(problem, informative_values(problem, b)), readout).argmax(1) == b.labels).sum())
    acc, att, orc = (hits.double() / batch.N).tolist()
    return Accuracy(acc, att, orc)
