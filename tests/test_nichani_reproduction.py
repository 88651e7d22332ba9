"""lib.factual.reference (chapter 11): the book's model at Nichani et al.'s sequential-learning settings
against the stored run of their own code (book/data/nichani_reference.json, written by
scripts/nichani_reference.py), and the float32-tie effect on their accuracies.

The loss tolerance comes from the book's own spread over seeds (book/data/nichani_book_seeds.json,
scripts/nichani_seed_spread.py): their run and the book's draw different samples of the same
distribution, so at each logged step their difference has standard deviation about sqrt(2) times the
spread over seeds (pooled over the logged steps: about 1.1e-4 nats, so the tolerance is about 6e-4). The
reference itself covers their first 4544 steps (logged 0 to 4480), not all 2^13: see the driver. The
book's run here is a prefix of the full 2^13 steps (PREFIX), to keep the test near half a minute on one core."""

import json
import math
import os

import pytest
import torch

from lib import factual as F
from lib.core.seed import get_draw

DATA = os.path.join(os.path.dirname(__file__), "..", "book", "data")
PREFIX = 2561          # steps of the book's run in this test (their run: 8192); logs at 0, 64, ..., 2560
LOG = 64               # their log spacing
K_SIGMA = 4.0          # tolerance: K_SIGMA sqrt(2) sd, sd the book's pooled spread over seeds


def _load(name):
    with open(os.path.join(DATA, name)) as fh:
        return json.load(fh)


@pytest.fixture(scope="module")
def reference():
    return _load("nichani_reference.json")


@pytest.fixture(scope="module")
def seeds():
    return _load("nichani_book_seeds.json")


@pytest.fixture(scope="module")
def book_run():
    torch.set_num_threads(1)
    return F.nichani_sequential_run(steps=PREFIX, seed=0, log_every=LOG)


def test_reference_file_records_its_provenance_and_their_settings(reference):
    p, s = reference["provenance"], reference["settings"]
    assert p["repo"] == "eshnich/factual-recall-iclr" and len(p["commit"]) == 40
    assert p["file"] == "sequential-learning.ipynb" and p["smoke_steps"] is None
    assert p["jax"] and p["date"]
    assert (s["D"], s["n_noise"], s["T"], s["vocab"], s["d"], s["n_answer"]) == (8, 20, 32, 41, 41, 32)
    assert (s["lr"], s["init"], s["steps"], s["batch"], s["n_test"], s["log_every"]) == \
        (0.1, 1e-5, 8192, 1024, 65536, 64)
    assert s["fact_dict"] == F.fact_table(F.nichani_task()).tolist()      # their structured table, ours
    assert p["stop"] == 4544                                    # their first 4544 of 8192 steps
    assert [r["step"] for r in reference["logged"]] == list(range(0, 4544, 64))
    task = F.nichani_task()
    assert all(s[k] == getattr(task, k) for k in ("S", "R", "D", "T", "n_noise", "eos"))
    assert (s["vocab"], s["n_answer"]) == (task.vocab, task.n_answers)
    assert (s["lr"], s["init"], s["batch"], s["n_test"], s["log_every"]) == tuple(
        F.NICHANI_RUN[k] for k in ("lr", "init", "batch", "n_test", "log_every"))


def test_structured_table_gives_every_relation_the_same_assignment():
    a = F.fact_table(F.FactTask(S=16, R=4, D=8, table="structured"))
    local = a - 8 * torch.arange(4)[None, :]
    assert (local == (torch.arange(16) // 2)[:, None]).all()               # floor(s D / S), every r


def test_count_route_equals_the_model_on_sequences():
    task = F.nichani_task()
    model = F.LinearAttention(task, "orthogonal", init=1e-5)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        model.A.copy_(torch.randn(model.A.shape, generator=g))
        model.W.copy_(torch.randn(model.W.shape, generator=g))
        b = F.sample(task, 512, "test")
        direct, counted = model(b.x), F.count_logits(model, F.sequence_counts(task, b.x))
    assert torch.allclose(direct, counted, rtol=1e-5, atol=1e-4)


def test_count_sampler_matches_the_sequence_sampler_in_distribution():
    task = F.nichani_task()
    table = F.fact_table(task)
    N = 40000
    c_seq = F.sequence_counts(task, F.sample(task, N, "test", table).x).double()
    c_cnt, y = F.sample_counts(task, N, torch.Generator().manual_seed(0), table)
    c_cnt = c_cnt.double()
    assert (c_cnt.sum(1) == task.T).all() and (c_cnt[:, task.eos_token] == 1).all()
    assert (c_cnt[:, :task.S].sum(1) == 1).all() and (c_cnt[:, task.S:task.S + task.R].sum(1) == 1).all()
    for f in (lambda c: c, lambda c: c ** 2):                  # first and second moments of every count
        m1, m2 = f(c_seq).mean(0), f(c_cnt).mean(0)
        se = torch.sqrt(f(c_seq).var(0) / N + f(c_cnt).var(0) / N).clamp_min(1e-12)
        assert ((m1 - m2).abs() <= 5 * se).all()
    s, r = c_cnt[:, :task.S].argmax(1), c_cnt[:, task.S:task.S + task.R].argmax(1)
    assert torch.equal(y, table[s, r])


def seed_spread(seeds):
    """Pooled standard deviation over seeds of the book's logged loss, over the logged steps at which the
    curve has left log(R D) (before that every run sits at log 32 to about 1e-6). Pooled, because a
    5-seed estimate per step is itself noisy (it ranges from 4e-5 to 2e-4 there)."""
    runs = list(seeds["runs"].values())
    var = []
    for j, t in enumerate(runs[0]["step"]):
        v = [r["loss"][j] for r in runs]
        m = sum(v) / len(v)
        if m < math.log(32) - 0.01:
            var.append(sum((x - m) ** 2 for x in v) / (len(v) - 1))
    return math.sqrt(sum(var) / len(var)), len(runs)


@pytest.mark.slow
def test_book_loss_follows_their_curve_within_the_seed_spread(reference, seeds, book_run):
    ref = {r["step"]: r["loss"] for r in reference["logged"]}
    sd, n_seeds = seed_spread(seeds)
    assert n_seeds >= 5
    tol = K_SIGMA * math.sqrt(2) * sd          # their run and the book's: two independent draws
    assert tol < 1e-3, f"the seed spread {sd:.2e} makes the test unable to fail"
    runs = list(seeds["runs"].values())
    compared = 0
    for i, t in enumerate(book_run["step"]):
        assert abs(book_run["loss"][i] - ref[t]) <= tol, (t, book_run["loss"][i], ref[t], tol)
        if get_draw() == 0:                                     # the stored seed-0 run is this run
            assert book_run["loss"][i] == pytest.approx(runs[0]["loss"][runs[0]["step"].index(t)], abs=1e-6)
        if ref[t] < math.log(32) - 0.01:                        # the curve has left log(R D)
            compared += 1
    assert compared >= 5


def test_stored_book_seeds_follow_their_whole_stored_curve_to_three_decimals(reference, seeds):
    """Every stored seed of the book against every logged step of their run (0 to 4480), within 1e-3
    nats. Not the seed band: at step 4288, in the fast descent (about 4e-3 nats a step), all five seeds
    sit 5.1 to 6.6 pooled sd (5.6e-4 to 7.3e-4 nats) below their run, a systematic lag of their curve by
    a fraction of a step that seed noise does not explain; everywhere else the seeds are within 5 sd."""
    ref = {r["step"]: r["loss"] for r in reference["logged"]}
    assert max(ref) >= 4480 and len(ref) >= 70
    worst = 0.0
    for r in seeds["runs"].values():
        for t, v in zip(r["step"], r["loss"]):
            if t in ref:
                worst = max(worst, abs(v - ref[t]))
    assert worst <= 1e-3, worst


@pytest.mark.slow
def test_float32_probabilities_tie_and_argmax_goes_to_index_zero(reference, book_run):
    task = F.nichani_task()
    y = F.sample(task, F.NICHANI_RUN["n_test"], "test").y
    first_of_block = float((y % task.D == 0).double().mean())
    answer0 = float((y == 0).double().mean())
    early = [i for i, t in enumerate(book_run["step"]) if 0 < t <= 512]
    assert early
    for i in early:                                    # logits differ, probabilities do not
        assert book_run["frac_prob_ties"][i] == 1.0
        assert book_run["frac_pred_answer0"][i] == 1.0
        assert book_run["acc"][i] == pytest.approx(answer0, abs=1e-12)
        assert book_run["acc_logits"][i] > book_run["acc"][i] + 0.1
    for r in reference["logged"]:                      # their run shows the same at the same steps
        if 0 < r["step"] <= 512:
            assert r["frac_prob_ties"] == 1.0 and r["frac_pred_answer0"] == 1.0
            assert r["acc_logits"] > r["acc"] + 0.1
    # once the relation's block is resolved but the subject's place is not: relation accuracy 1 and
    # accuracy = the share of labels that are the first answer of their block (1/D)
    both = [i for i, t in enumerate(book_run["step"])
            if book_run["rel_acc"][i] == 1.0 and book_run["frac_pred_block_first"][i] == 1.0]
    assert both
    for i in both:
        assert book_run["frac_prob_ties"][i] == 1.0
        assert book_run["acc"][i] == pytest.approx(first_of_block, abs=1e-12)
    theirs = [r for r in reference["logged"] if r["rel_acc"] == 1.0 and r["frac_prob_ties"] == 1.0]
    assert theirs and all(abs(r["acc"] - 1 / task.D) < 0.01 for r in theirs)


@pytest.mark.parametrize("kw, name", [
    (dict(steps=0), "steps"), (dict(seed=-1), "seed"), (dict(batch=0), "batch"), (dict(lr=0.0), "lr"),
    (dict(lr=float("nan")), "lr"), (dict(init="x"), "init"), (dict(log_every=0), "log_every"),
    (dict(n_test=0), "n_test"), (dict(schedule="linear"), "schedule"), (dict(steps=True), "steps"),
])
def test_bad_arguments_name_the_parameter(kw, name):
    with pytest.raises(ValueError, match=name):
        F.nichani_sequential_run(**kw)


def test_stored_book_runs_load_by_name_and_match_the_files():
    assert F.load_nichani_book_runs("nichani_book_seeds") == _load("nichani_book_seeds.json")
    cos = F.load_nichani_book_runs("nichani_book_cosine")
    assert cos["settings"]["schedule"] == "cosine" and len(cos["runs"]["0"]["step"]) == 128
    with pytest.raises(ValueError, match="name"):
        F.load_nichani_book_runs("../reference")


def test_count_sampler_needs_the_eos_task():
    task = F.FactTask(S=4, R=2, D=2, T=6, eos=False)
    with pytest.raises(ValueError, match="eos"):
        F.sample_counts(task, 8, torch.Generator(), F.fact_table(task))


def test_helpers_reject_wrong_arguments_by_name():
    task = F.nichani_task()
    table = F.fact_table(task)
    g = torch.Generator()
    model = F.LinearAttention(task, "orthogonal")
    cases = [
        (lambda: F.sample_counts("task", 4, g, table), "task"),
        (lambda: F.sample_counts(task, 0, g, table), "N"),
        (lambda: F.sample_counts(task, 4, 0, table), "g must"),
        (lambda: F.sample_counts(task, 4, g, table[:3]), "table"),
        (lambda: F.sequence_counts(task, torch.zeros(2, 5, dtype=torch.long)), "x must"),
        (lambda: F.sequence_counts(task, torch.full((2, 32), 99)), "x must"),
        (lambda: F.count_logits(F.LinearAttention(task, "random", d=8), torch.zeros(2, 41)), "model"),
        (lambda: F.count_logits(model, torch.zeros(2, 40)), "c must"),
        (lambda: F.nichani_task(-1), "seed"),
    ]
    for call, name in cases:
        with pytest.raises(ValueError, match=name):
            call()
