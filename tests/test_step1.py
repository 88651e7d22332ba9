"""lib.analysis.step1 (chapter 4's measurements) and lib.plotting.loglog_panel: shapes, agreement
with the direct computation, and arguments that are refused with a ValueError naming them."""
import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import lib  # noqa: E402
from lib import theory  # noqa: E402
from lib.analysis import step1  # noqa: E402
from lib.analysis.decompose import decompose, pooled_terms  # noqa: E402

CFG = lib.TaskConfig(V=16, d=8, L=2, dtype="float64", device="cpu")


def test_step1_terms_are_pooled_terms_in_signal_units_with_the_shared_sum():
    meas = step1.step1_terms(CFG, 256, range(2), n_test=20)
    raw = pooled_terms(CFG, 256, range(2), n_test=20, max_off=20_000)
    unit = theory.step1_signal_unit(16, 2)
    assert set(meas) == set(step1.STEP1_TERMS)
    assert torch.allclose(meas["signal"][0], raw["signal"][0] / unit)
    assert torch.allclose(meas["trigger+ubar"][1], (raw["trigger"][1] + raw["ubar"][1]) / unit)
    table = step1.term_table(meas, theory.step1_term_moments(256, 8, 2, 16))
    assert len(table.splitlines()) == 2 + len(meas) and "trigger+ubar" in table


def test_term_sd_sweep_shapes_and_values():
    settings = [(CFG, 128), (CFG.with_(d=16), 128)]
    m, p, per = step1.term_sd_sweep(settings, range(3), n_test=10)
    assert m.shape == p.shape == (2, 6) and per.shape == (2, 6, 3, 2)
    direct = step1.step1_terms(CFG.with_(d=16), 128, range(3), n_test=10)
    assert m[1, 0] == pytest.approx(float(direct["signal"][0].std()))
    assert m[1, 1] == pytest.approx(float(direct["crosstalk"][1].std()))
    assert p[0, 3] == pytest.approx(theory.step1_term_moments(128, 8, 2, 16)["trigger"]["var_off"] ** 0.5)
    # per-seed means of the signal at y are the pooled means of each problem
    assert per[0, 0, :, 0] == pytest.approx(step1.step1_terms(CFG, 128, range(3), n_test=10)["signal"][2].numpy())


def test_label_table_reads_the_logit_of_the_label():
    p = lib.make_problem(CFG, 0)
    dec = decompose(p, lib.sample_batch(p, 64, 0), lib.sample_batch(p, 8, 0, "test"))
    rows = step1.label_table(dec, 0.5, rows=3).splitlines()
    assert len(rows) == 4
    assert float(rows[1].split()[-1]) == pytest.approx(float(dec.logits[0, dec.labels[0]]) / 0.5, abs=0.01)


def test_step1_accuracy_with_orthogonal_embeddings_at_L1_is_perfect():
    p = lib.make_problem(lib.TaskConfig(V=8, d=18, L=1, embedding="orthogonal", dtype="float64", device="cpu"), 0)
    assert step1.step1_accuracy(p, 0, n_train=400, n_test=200) == 1.0


def test_coverage_runs_count_first_sightings():
    c = step1.coverage_runs(16, 5)
    assert c["K"].shape == (5, len(c["N"])) and (np.diff(c["K"], axis=1) >= 0).all()
    assert (c["K"] <= 16).all() and c["waits"].shape == (5,)
    # a batch that has seen every token by N has a waiting time of at most N
    full = c["K"][:, -1] == 16
    assert (c["waits"][full] <= c["N"][-1]).all()
    assert c["mean"][-1] == pytest.approx(theory.coverage_mean(int(c["N"][-1]), 16))


def test_loglog_panel_returns_the_fitted_slopes():
    import matplotlib.pyplot as plt

    x = [1, 2, 4, 8]
    meas = np.array([[xi ** -0.5, 3 * xi] for xi in x])
    _, ax = plt.subplots()
    sl = lib.plotting.loglog_panel(ax, x, meas, meas, ["a", "b"], {"a": "k", "b": "r"}, "x", "y")
    plt.close("all")
    assert sl["a"] == pytest.approx(-0.5) and sl["b"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="measured and predicted"):
        lib.plotting.loglog_panel(ax, x, meas[:3], meas, ["a", "b"], {}, "x", "y")


@pytest.mark.parametrize("call, name", [
    (lambda: step1.step1_terms(CFG, 64, []), "seeds"),
    (lambda: step1.step1_terms(CFG, 64, range(1), n_test=0), "n_test"),
    (lambda: step1.term_table({"x": None}, {}), "pred"),
    (lambda: step1.term_sd_sweep([], range(1)), "settings"),
    (lambda: step1.step1_accuracy(lib.make_problem(CFG, 0), -1), "seed"),
    (lambda: step1.step1_accuracy(lib.make_problem(CFG, 0), 0, n_train=0), "n_train"),
    (lambda: step1.coverage_runs(1, 3), "V"),
    (lambda: step1.coverage_runs(8, 0), "seeds"),
])
def test_bad_arguments_are_named(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_coverage_runs_counts_a_token_never_seen_as_waiting_past_the_batch(monkeypatch):
    # a batch whose informative tokens are only 0 and 1: every other token is never seen, so its wait is the
    # documented 3 V log V + 1 (one past the batch) and it is counted at no N of the grid (the
    # sentinel used to be one larger)
    import types
    from lib.analysis import step1 as s1
    V = 8
    n_max = int(3 * V * np.log(V))
    monkeypatch.setattr(s1, "sample_batch", lambda pc, n, seed: types.SimpleNamespace(
        informative=torch.arange(n) % 2))
    out = s1.coverage_runs(V, seeds=2, points=4)
    assert out["waits"].tolist() == [n_max + 1.0, n_max + 1.0]
    assert out["K"].tolist() == [[min(int(n), 2) for n in out["N"]]] * 2        # tokens 0, 1 first seen at 0, 1
