"""Chapter 11's models trained many at once: M `FactTransformer`s as one module whose parameters carry a
leading model axis, trained by one loop with one `torch.optim.Adam` (or SGD) over the stacked tensors.

Why it is the same training. Each model keeps its own task, sizes, embeddings and initialisation (its
parameters are copied in, zero-padded to the largest heads and MLP width of the stack), its own batches
(batch i is the stream "step-i" of its task's seed, as `train_facts`) and its own test set. The loss is
the sum over models of each model's mean cross-entropy, so each model's gradient is the one it would get
alone; Adam and SGD act element by element, so each model's update is the one it would get alone. A
padded head (Q = K = V = 0, its rows of O zero) outputs 0 and gets a zero gradient, a padded MLP unit
(its column of W1, its bias and its row of W2 zero, sigma(0) = 0) likewise, and Adam moves a parameter
whose gradients are all zero by exactly 0: the padding stays zero and changes nothing. A model leaves the
stack when it stops (its `stop_at`, or the last step), with its parameters and Adam moments. The results
equal `train_facts`'s within float round-off (tests/test_factual_stacked.py: float64, 1e-9).

Why it is faster. One step of a small model is mostly per-operation overhead: M models in one stack pay
it once. And the attention is computed through the query instead of through every key: with one query
per sequence, the scores are e_t . (K_h q_h) and the output is (sum_t a_t e_t) V_h, O(H d (T + d_h)) per
sequence instead of O(H T d d_h) (`FactTransformer.attention` forms every key and value). A search trains
models of several sizes on one task, each on the same batches: a `BatchCache` shared by its stacks draws each
batch once.

`train_stacked(models, cfg)` returns the FactHistory of each model, as `train_facts` would; `stackable`
says why a list of models cannot share a stack.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict

import torch

from ..core.config import check_int
from ..core.seed import get_draw
from .models import FactModelConfig, FactTransformer
from .task import FactTask, _check_task, fact_table, relation_only, sample
from .training import FactHistory, FactTrainConfig, metrics


# head dimension above which the attention goes through the query (O(H d T) per sequence in small batched
# products) rather than through every key (O(H d_h d T) in one large product): measured on one thread, the
# query route is 3x faster at d_h = 16, T = 32 and 1.5x slower at d_h = 2, T = 6 (bench/bench_fact_stack.py)
QUERY_ROUTE_DH = 4
ROUTES = ("query", "keys")


def attention_route(d_h: int) -> str:
    """The attention route a stack takes by default: "query" when d_h > QUERY_ROUTE_DH, else "keys" (every
    position's key and value, B T H d_h d). Both give the same logits to float round-off
    (tests/test_factual_stacked.py); bench/bench_fact_stack.py times them at each size."""
    return "query" if check_int("d_h", d_h, 1) > QUERY_ROUTE_DH else "keys"


# what models must share to train in one stack, as named in `stackable`'s answers
STACK_FIELDS = ("d", "d_h", "values", "activation", "train_embeddings", "answers R D", "T")


def stack_key(task, cfg) -> tuple:
    """The values of `STACK_FIELDS` for a (FactTask, FactModelConfig): models whose keys are equal (and whose
    embeddings are frozen) can share a stack, whatever their heads and MLP widths (given sigma(0) = 0)."""
    if not isinstance(task, FactTask) or not isinstance(cfg, FactModelConfig):
        raise ValueError(f"task and cfg must be a FactTask and a FactModelConfig, got {type(task).__name__} and "
                         f"{type(cfg).__name__}")
    return (cfg.d, cfg.d_h, cfg.values, cfg.activation, cfg.train_embeddings, task.n_answers, task.T)


def stackable(models) -> str | None:
    """None when `models` can be trained in one stack, else why not: FactTransformers with frozen
    embeddings, one dtype, and equal `stack_key`s (d, d_h, values, activation, answers R D, length T);
    MLP widths may differ only if sigma(0) = 0; with values='identity', one head each."""
    if not isinstance(models, (list, tuple)) or not models:
        return "models must be a non-empty list of FactTransformer"
    if not all(isinstance(m, FactTransformer) for m in models):
        return "models must all be FactTransformer"
    first = models[0]
    if any(m.cfg.train_embeddings for m in models):
        return "models must have frozen embeddings (train_embeddings=False)"
    keys = [stack_key(m.task, m.cfg) for m in models]
    for j, name in enumerate(STACK_FIELDS):
        if len({k[j] for k in keys}) > 1:
            return f"models must share {name}"
    if len({m.Q.dtype for m in models}) > 1:
        return "models must share one dtype"
    if len({m.cfg.m for m in models}) > 1:
        zero = first.sigma(torch.zeros(1, dtype=torch.float64))
        if float(zero.abs()) != 0.0:
            return f"MLP widths differ and sigma(0) = {float(zero)} != 0: padded units would train"
    return None


class StackedFacts(torch.nn.Module):
    """M FactTransformers as one module: forward(x: (M, B, T) ids, each model's own) -> logits (M, B, R D);
    `route` one of ROUTES for every forward, or None: `attention_route`'s choice at each call.
    Parameters Q, K, V (M, H, d, d_h), O (M, H d_h, d), W1 (M, d, m), b1 (M, m), W2 (M, m, d), zero-padded to
    the stack's largest H and m; embeddings (M, vocab, d) and unembeddings (M, R D, d) as buffers."""

    def __init__(self, models, route: str | None = None):
        super().__init__()
        why = stackable(models)
        if why:
            raise ValueError(why)
        if route is not None and route not in ROUTES:
            raise ValueError(f"route must be None or one of {', '.join(ROUTES)}, got {route!r}")
        self.route = route
        first = models[0]
        self.cfg0, self.M = first.cfg, len(models)
        self.H = max(m.cfg.H for m in models)
        self.m = max(m.cfg.m for m in models)
        self.identity = first.cfg.values == "identity"
        self.sigma = first.sigma
        dtype, d, dh = first.Q.dtype, first.cfg.d, first.cfg.d_h
        vocab = max(m.task.vocab for m in models)

        def stack(get, shape):
            out = torch.zeros(self.M, *shape, dtype=dtype)
            for i, mod in enumerate(models):
                t = get(mod).detach()
                out[i][tuple(slice(0, s) for s in t.shape)] = t
            return out
        self.register_buffer("wte", stack(lambda m: m.wte, (vocab, d)))
        self.register_buffer("unembed", stack(lambda m: m.unembed, (first.task.n_answers, d)))
        self.Q = torch.nn.Parameter(stack(lambda m: m.Q, (self.H, d, dh)))
        self.K = torch.nn.Parameter(stack(lambda m: m.K, (self.H, d, dh)))
        if not self.identity:
            self.V = torch.nn.Parameter(stack(lambda m: m.V, (self.H, d, dh)))
            self.O = torch.nn.Parameter(stack(lambda m: m.O, (self.H * dh, d)))
        if self.m > 0:
            # a model without an MLP (m = 0) in a stack with one: its zero units add sigma(0) W2 = 0
            self.W1 = torch.nn.Parameter(stack(lambda m: m.W1 if m.cfg.m else torch.zeros(d, 0), (d, self.m)))
            self.b1 = torch.nn.Parameter(stack(lambda m: m.b1 if m.cfg.m else torch.zeros(0), (self.m,)))
            self.W2 = torch.nn.Parameter(stack(lambda m: m.W2 if m.cfg.m else torch.zeros(0, d), (self.m, d)))

    def tensors(self, rows: torch.Tensor | None = None) -> dict:
        """The stack's parameters and buffers by name (those of the models `rows` only, if given)."""
        out = dict(self.named_parameters()) | dict(self.named_buffers())
        return out if rows is None else {k: t[rows] for k, t in out.items()}

    def forward(self, x: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (M, B, R D) of x (M, B, T); with `rows`, of those models only (x: (len(rows), B, T))."""
        w = self.tensors(rows)
        M, B, T = x.shape
        H, dh = w["Q"].shape[1], self.cfg0.d_h
        d = w["wte"].shape[2]
        route = self.route or attention_route(dh)
        vocab = w["wte"].shape[1]
        ids = x + (torch.arange(M, device=x.device) * vocab)[:, None, None]       # model i's ids into its own rows
        e = w["wte"].reshape(M * vocab, d).index_select(0, ids.reshape(-1)).view(M, B, T, d)
        heads = lambda W: W.permute(0, 2, 1, 3).reshape(M, d, -1)                # (M, H, d, k) -> (M, d, H k)
        q = torch.bmm(e[:, :, -1].contiguous(), heads(w["Q"])).view(M, B, H, dh)   # the last position's query
        if route == "query":         # through the query: scores e_t . (K_h q_h), output (sum_t a_t e_t) V_h
            kq = torch.einsum("mbhk,mhdk->mbhd", q, w["K"])                        # (M, B, H, d)
            a = torch.softmax(torch.einsum("mbtd,mbhd->mbht", e, kq) / math.sqrt(dh), dim=-1)
            mix = torch.einsum("mbht,mbtd->mbhd", a, e)                            # (M, B, H, d)
            if self.identity:
                return self._rest(w, mix[:, :, 0])
            v = torch.einsum("mbhd,mhdk->mbhk", mix, w["V"]).reshape(M, B, -1)     # (M, B, H d_h)
            return self._rest(w, torch.bmm(v, w["O"]))
        # through the keys: every key in one product
        k = torch.bmm(e.reshape(M, B * T, d), heads(w["K"])).view(M, B, T, H, dh)
        v = None if self.identity else torch.bmm(e.reshape(M, B * T, d), heads(w["V"])).view(M, B, T, H, dh)
        a = torch.softmax((k * q[:, :, None]).sum(-1) / math.sqrt(dh), dim=2)      # (M, B, T, H)
        if self.identity:
            return self._rest(w, (a[..., 0, None] * e).sum(2))                     # V = O = I_d, one head
        return self._rest(w, torch.bmm((a[..., None] * v).sum(2).reshape(M, B, -1), w["O"]))

    def _rest(self, w: dict, h: torch.Tensor) -> torch.Tensor:
        """The MLP with its residual, then the unembedding: (M, B, d) -> (M, B, R D)."""
        if self.m > 0:
            h = h + torch.bmm(self.sigma(torch.baddbmm(w["b1"][:, None, :], h, w["W1"])), w["W2"])
        return torch.bmm(h, w["unembed"].transpose(1, 2))


class BatchCache:
    """Training batches kept between stacks. Batch i of a task (its stream "step-i", `sample`'s x and y) is the
    same for every model of that task and every stack it trains in, so the later rounds of a search, which train
    other sizes on the same task, read the batches its first round drew instead of drawing them again (drawing is
    a cost per step and task that does not shrink with the models, so small stacks feel it most). What `get`
    returns equals `sample`'s tensors, so training with or without a cache is the same bit for bit
    (tests/test_factual_stacked.py). Batches are keyed by the task, the batch size and the draw
    (`lib.core.seed.get_draw`), and copied into buffers of `CHUNK` steps each, so that the many small batches
    kept do not pin the sampler's freed memory. At most `max_bytes` of buffers are kept, and the buffer just read:
    past it the tasks least recently read are dropped, then the current task's other buffers (and drawn again
    if needed). Not thread-safe: one thread trains."""

    CHUNK = 64                                       # steps a buffer holds

    def __init__(self, max_bytes: int = 1 << 30):
        self.max_bytes = check_int("max_bytes", max_bytes, 0)
        self.tasks: OrderedDict = OrderedDict()      # (task, N, draw) -> {"table", chunk: (xs, ys, filled)}, LRU first
        self.bytes = 0                               # bytes of the buffers kept
        self.drawn = 0                               # batches drawn (not found) since construction

    def get(self, task: FactTask, N: int, i: int) -> tuple:
        """(x, y) equal to `sample(task, N, f"step-{i}")`'s under the current draw, drawn once and then kept."""
        _check_task(task)
        N, i = check_int("N", N, 1), check_int("i", i, 0)
        key = (task, N, get_draw())
        entry = self.tasks.get(key)
        if entry is None:
            entry = self.tasks[key] = {"table": fact_table(task)}
        self.tasks.move_to_end(key)
        c, r = divmod(i, self.CHUNK)
        if c not in entry:
            xs = torch.empty(self.CHUNK, N, task.T, dtype=torch.long)
            ys = torch.empty(self.CHUNK, N, dtype=torch.long)
            entry[c] = (xs, ys, torch.zeros(self.CHUNK, dtype=torch.bool))
            self.bytes += xs.nbytes + ys.nbytes
        xs, ys, filled = entry[c]
        if not filled[r]:
            b = sample(task, N, f"step-{i}", entry["table"])
            xs[r], ys[r] = b.x, b.y
            filled[r] = True
            self.drawn += 1
        while self.bytes > self.max_bytes and len(self.tasks) > 1:     # this task is the most recent: kept
            _, old = self.tasks.popitem(last=False)
            self.bytes -= sum(v[0].nbytes + v[1].nbytes for k, v in old.items() if k != "table")
        for k in [k for k in entry if k not in ("table", c)] if self.bytes > self.max_bytes else ():
            self.bytes -= entry[k][0].nbytes + entry[k][1].nbytes     # then its other buffers
            del entry[k]
        return xs[r], ys[r]


def batch_cache(cache) -> BatchCache:
    """`cache` if it is a `BatchCache`, a new one (default size) for None; else a ValueError naming it."""
    if cache is None:
        return BatchCache()
    if not isinstance(cache, BatchCache):
        raise ValueError(f"cache must be None or a BatchCache, got {type(cache).__name__}")
    return cache


def train_stacked(models, cfg: FactTrainConfig, device: str = "cpu", test_chunk: int = 8,
                  route: str | None = None, cache: BatchCache | None = None) -> list:
    """`train_facts(model, cfg)` for every model of `models`, in one stack (`StackedFacts`): the list of
    their FactHistory, in order. Each model stops as `train_facts` would (its test accuracy reaching
    `cfg.stop_at` at a logged step, or the last step) and then leaves the stack. `seconds` is the stack's
    wall time up to that model's stop. The models themselves are not modified. `test_chunk`: models
    evaluated at once on their test sets (memory: test_chunk n_test T d numbers). `route`: the stack's attention
    route (None: `attention_route`'s at each call). `cache`: a `BatchCache` to read and keep the training batches
    in (shared by the stacks of a search; None: drawn for this stack only)."""
    why = stackable(models)
    if why:
        raise ValueError(why)
    if not isinstance(cfg, FactTrainConfig):
        raise ValueError(f"cfg must be a FactTrainConfig, got {type(cfg).__name__}")
    if isinstance(test_chunk, bool) or not isinstance(test_chunk, int) or test_chunk < 1:
        raise ValueError(f"test_chunk must be a positive integer, got {test_chunk!r}")
    if route is not None and route not in ROUTES:
        raise ValueError(f"route must be None or one of {', '.join(ROUTES)}, got {route!r}")
    if cache is not None:
        cache = batch_cache(cache)
    tasks = [m.task for m in models]
    tables = {t: fact_table(t) for t in set(tasks)}
    qs = {t: relation_only(t, tables[t]).to(device) for t in tables}
    tests = {t: sample(t, cfg.n_test, "test", tables[t]) for t in tables}
    test_x = torch.stack([tests[t].x for t in tasks]).to(device)                 # (M, n_test, T)
    stack = StackedFacts(models, route).to(device)
    params = [p for p in stack.parameters()]
    opt = (torch.optim.Adam(params, lr=cfg.lr) if cfg.optimizer == "adam" else torch.optim.SGD(params, lr=cfg.lr))
    sched = (torch.optim.lr_scheduler.CosineAnnealingLR(opt, cfg.steps) if cfg.schedule == "cosine" else None)
    hists = [FactHistory() for _ in models]
    live = list(range(len(models)))                  # stack row j is model live[j]
    t0 = time.perf_counter()
    for i in range(cfg.steps + 1):
        if i % cfg.log_every == 0 or i == cfg.steps:
            done = []
            with torch.no_grad():
                for j0 in range(0, len(live), test_chunk):
                    rows = torch.arange(j0, min(j0 + test_chunk, len(live)))
                    logits = stack(test_x[torch.tensor(live)[rows]], rows.to(device))
                    for r, logit in zip(rows.tolist(), logits):
                        k = live[r]
                        mt = metrics(logit, tests[tasks[k]], tasks[k], qs[tasks[k]])
                        h = hists[k]
                        h.step.append(i)
                        for name, val in mt.items():
                            getattr(h, name).append(val)
                        h.lr.append(float(opt.param_groups[0]["lr"]))
                        if not math.isfinite(mt["loss"]):
                            raise FloatingPointError(f"test loss of model {k} is not finite at step {i}: "
                                                     f"lower lr (got {cfg.lr})")
                        if (cfg.stop_at is not None and mt["acc"] >= cfg.stop_at) or i == cfg.steps:
                            h.seconds = time.perf_counter() - t0
                            done.append(r)
            if done:
                keep = torch.tensor([r for r in range(len(live)) if r not in done], dtype=torch.long)
                live = [live[r] for r in keep.tolist()]
                if not live:
                    break
                _keep_rows(stack, opt, keep.to(device))
        batches = {}                                 # models of one task share its batch
        for k in live:
            if tasks[k] not in batches:
                if cache is None:                    # drawn for this step only
                    b = sample(tasks[k], cfg.batch, f"step-{i}", tables[tasks[k]])
                    batches[tasks[k]] = (b.x, b.y)
                else:
                    batches[tasks[k]] = cache.get(tasks[k], cfg.batch, i)
        x = torch.stack([batches[tasks[k]][0] for k in live]).to(device)
        y = torch.stack([batches[tasks[k]][1] for k in live]).to(device)
        logits = stack(x)
        ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="none")
        loss = ce.view(len(live), -1).mean(1).sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
    return hists


def _keep_rows(stack: StackedFacts, opt: torch.optim.Optimizer, keep: torch.Tensor) -> None:
    """Keep only the stack's models `keep` (row indices): new parameters, each taking over its predecessor's
    place in the optimizer with its state (Adam's step and moments, SGD's buffer) restricted to those rows;
    buffers sliced. The optimizer object (and a scheduler bound to it) carries on."""
    for name, b in list(stack.named_buffers()):
        setattr(stack, name, b[keep])
    swap = {}
    for name, p in list(stack.named_parameters()):
        new = torch.nn.Parameter(p.detach()[keep].clone())
        st = opt.state.pop(p, {})
        opt.state[new] = {k: (v[keep] if isinstance(v, torch.Tensor) and v.dim() > 0 else v) for k, v in st.items()}
        setattr(stack, name, new)
        swap[p] = new
    for group in opt.param_groups:
        group["params"] = [swap[p] for p in group["params"]]
    stack.M = int(keep.numel())
