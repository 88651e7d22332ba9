"""Figure and page helpers, so that the same quantity has the same colour in every chapter and the
chapters' code cells stay short.

Colours: test accuracy, attention accuracy and oracle-attention accuracy; random vs orthogonal
embeddings; one-step (Hebbian) vs trained memories; predictions in black. `axes` opens a labelled
figure and `finish` adds the legend and shows it; `show` shows a figure only when every axis a reader sees
is labelled (`unlabelled` names those that are not; every figure of the book goes through it, and
tests/test_figures.py checks that it does); `loglog_with_fit` draws points on log-log axes
with their least-squares line and prints the fitted slope on the plot; `measured_and_predicted`
draws measurements beside the curve that predicts them; `glue_values` glues many numbers into the
page in one call (myst-nb).
"""

from __future__ import annotations

import numpy as np

from .theory import fit_power_law

COLORS = {
    "acc": "#1f77b4",          # test accuracy of the trained model
    "att_acc": "#ff7f0e",      # attention accuracy
    "oracle_acc": "#2ca02c",   # recall with oracle attention
    "random": "#d62728",       # random (non-orthogonal) embeddings
    "orthogonal": "#7f7f7f",   # exactly orthogonal embeddings
    "hebbian": "#9467bd",      # one-step (Hebbian) memory
    "trained": "#8c564b",      # memory trained to convergence
    "theory": "#000000",       # predictions
}


def axes(title: str, xlabel: str, ylabel: str, figsize=(6, 3.8), xscale: str = "linear",
         yscale: str = "linear"):
    """A new figure with one labelled axes; returns the axes."""
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(figsize=figsize)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_xscale(xscale)
    ax.set_yscale(yscale)
    return ax


def finish(ax, fontsize: float = 8, loc: str = "best") -> None:
    """Legend, then show the figure (through `show`, which checks its labels)."""
    ax.legend(fontsize=fontsize, loc=loc)
    show()


def unlabelled(fig) -> list:
    """The axes of `fig` that a reader could not read: for every visible axes that draws something (not a
    colorbar), "<title>: x" when neither it nor an axes sharing its x axis has an x label, "<title>: y" the
    same for y. A twin axes (`twinx`) shares x with its parent, so only its own y label is asked for."""
    out = []
    for i, ax in enumerate(fig.axes):
        if not ax.get_visible() or not ax.axison or getattr(ax, "_colorbar", None) is not None:
            continue
        if not (ax.lines or ax.collections or ax.images or ax.patches or ax.containers):
            continue
        name = ax.get_title() or f"axes {i}"
        for which, shared in (("x", ax.get_shared_x_axes()), ("y", ax.get_shared_y_axes())):
            label = lambda a: (a.get_xlabel() if which == "x" else a.get_ylabel()).strip()   # noqa: E731
            if not label(ax) and not any(label(o) for o in fig.axes if o is not ax and shared.joined(ax, o)):
                out.append(f"{name}: {which}")
    return out


def show(fig=None) -> None:
    """Show the open figures (or `fig`), after checking that every axis a reader sees is labelled
    (`unlabelled`): a ValueError names the axes that are not. Every figure of the book goes through here."""
    import matplotlib.pyplot as plt

    figs = [fig] if fig is not None else [plt.figure(n) for n in plt.get_fignums()]
    bad = [f"{b}" for f in figs for b in unlabelled(f)]
    if bad:
        raise ValueError("figure axes without a label (set_xlabel / set_ylabel): " + "; ".join(bad))
    plt.show()


def measured_and_predicted(ax, x, measured, predicted, color, label, theory_label, marker="o",
                           linestyle="-", theory_color="theory"):
    """Measurements as markers and their prediction as a line, on the same axes. `color` and
    `theory_color` are keys of COLORS or colours (predictions are black unless told otherwise)."""
    ax.plot(x, measured, marker, color=COLORS.get(color, color), label=label, ls="none")
    ax.plot(x, predicted, linestyle, color=COLORS.get(theory_color, theory_color), lw=1.2, label=theory_label)


def glue_values(**values) -> None:
    """Glue every keyword as a number (or text) into the page: `{glue:text}` `name`.

    NumPy and torch scalars become Python numbers first: their repr (`np.float64(0.86)` since
    NumPy 2) is what the page would receive, and `{glue:text}`name:.2f`` cannot format it."""
    from myst_nb import glue

    for name, value in values.items():
        glue(name, _plain(value), display=False)


def _plain(value):
    """A Python int/float/bool for a NumPy or torch scalar (0-d array or tensor); else `value`."""
    if isinstance(value, (np.generic, np.ndarray)) or type(value).__module__.startswith("torch"):
        if getattr(value, "ndim", 0) == 0 and hasattr(value, "item"):
            return value.item()
    return value


def loglog_with_fit(ax, x, y, color, label, marker="o"):
    """Scatter (x, y) on log-log axes with the fitted power law; returns (slope, constant)."""
    slope, c = fit_power_law(x, y)
    xs = np.geomspace(min(x), max(x), 50)
    ax.loglog(x, y, marker, color=color, label=f"{label} (slope {slope:.2f})")
    ax.loglog(xs, c * xs ** slope, "-", color=color, alpha=0.6)
    return slope, c


def show_sequences(ax, batch, n: int = 8, V: int | None = None):
    """Draw the first n sequences of a batch as coloured token ids, boxing the informative token
    and writing its label y = Pi*(x_l) at the right."""
    import matplotlib.patches as patches

    tok = batch.tokens[:n].cpu().numpy()
    pos, lab = batch.pos[:n].cpu().numpy(), batch.labels[:n].cpu().numpy()
    ax.imshow(tok, cmap="tab20", aspect="auto", vmin=0, vmax=V or tok.max() + 1)
    for r in range(tok.shape[0]):
        for c in range(tok.shape[1]):
            ax.text(c, r, str(tok[r, c]), ha="center", va="center", fontsize=8)
        ax.add_patch(patches.Rectangle((pos[r] - 0.5, r - 0.5), 1, 1, fill=False, lw=2.5, ec="red"))
        ax.text(tok.shape[1] - 0.3, r, f"  y = {lab[r]}", va="center", fontsize=9)
    ax.set_xlabel("position t (red box: informative position l, marked by z_trig)")
    ax.set_ylabel("sample n")
    ax.set_xticks(range(tok.shape[1]))
    ax.set_yticks(range(tok.shape[0]))


def gradient_vs_eta(etas, grad_per_eta: dict, p_max: dict, V: int, small: float = 1e-1):
    """Chapter 3: ||grad_{W_KQ}|| / eta against the first step size eta for each model (left axis,
    log-log, with the slope of ||grad|| against eta fitted for eta < small), and the mean largest
    output probability max_k p_{n,k} (right axis), which runs from 1/V to 1 as the softmax
    saturates."""
    import matplotlib.pyplot as plt

    etas = np.asarray(etas, float)
    ax = axes("The attention gradient per unit of $\\eta$ bends when the output softmax saturates",
              r"first step size $\eta$ (value matrix $W_V = \eta G_1$)",
              r"$\|\nabla_{W_{KQ}} \hat{\mathcal{L}}(\eta G_1, 0)\|_F \,/\, \eta$", figsize=(6.5, 4),
              xscale="log", yscale="log")
    right = ax.twinx()
    right.set_xscale("log")
    right.set_ylabel(r"mean $\max_k p_{n,k}$ (dotted)")
    right.set_ylim(0, 1.05)
    style = {"attn": ("o", COLORS["att_acc"], "attention-only", "full"),
             "mlp": ("s", COLORS["trained"], "attention + MLP", "none")}
    sel = etas < small
    for model, g in grad_per_eta.items():
        marker, color, name, fill = style.get(model, ("^", COLORS["acc"], model, "full"))
        slope, _ = fit_power_law(etas[sel], np.asarray(g)[sel] * etas[sel])
        ax.plot(etas, g, marker + "-", color=color, fillstyle=fill, ms=6 if fill == "full" else 8, lw=1,
                label=f"{name} (slope of the gradient for $\\eta < {small:g}$: {slope:.3f})")
        right.plot(etas, p_max[model], ":", color=color, lw=1.5)
    right.axhline(1 / V, color="gray", lw=0.8, ls="--")
    right.text(etas[0], 1 / V + 0.02, "1/V (uniform)", fontsize=8, color="gray")
    finish(ax, loc="center left")


def capacity_figure(d_hebb, n_hebb, d_grid, n_heur, d_train, n_train, budget: int, fit_from: int = 64):
    """Chapter 2: capacity n* of a d x d linear memory on log-log axes: orthogonal embeddings (n = d),
    one-step memories (slope fitted on d >= fit_from) beside the book's heuristic, trained memories
    (Adam, `budget` steps) with their fit, and the guide line d^2 = 1.3 n log n of Nichani et al.'s
    notebook linear_AM.ipynb."""
    from .theory import capacity_from_constant

    ax = axes("Capacity of a d x d linear associative memory", "embedding dimension d",
              "capacity n* (pairs recalled at 99 %)", figsize=(6.5, 4.2), xscale="log", yscale="log")
    loglog_with_fit(ax, d_hebb, d_hebb, COLORS["orthogonal"], "orthogonal embeddings", "s")
    big = [i for i, d in enumerate(d_hebb) if d >= fit_from]
    slope, _ = fit_power_law([d_hebb[i] for i in big], [n_hebb[i] for i in big])
    ax.plot(d_hebb, n_hebb, "o", color=COLORS["hebbian"],
            label=f"random, one-step memory (slope {slope:.2f} for d $\\geq$ {fit_from})")
    ax.plot(d_grid, n_heur, "-", color=COLORS["theory"], lw=1.2, label="one-step: the book's heuristic")
    loglog_with_fit(ax, d_train, n_train, COLORS["trained"], f"random, trained memory (Adam, {budget} steps)", "^")
    ds = np.geomspace(min(min(d_train), min(d_hebb)), max(d_hebb), 50)
    ax.plot(ds, [capacity_from_constant(d, 1.3) for d in ds], ":", color=COLORS["trained"],
            label=r"guide line $d^2 = 1.3\, n \log n$ (Nichani et al.'s notebook)")
    finish(ax)


def hand_built_accuracy_figure(dims, acc: dict, att: dict, predicted: dict, V: int, L: int) -> None:
    """Chapter 1: test accuracy of the hand-built transformer against d (log scale), the mean over
    problems of each per-problem array in acc[tiv], beside its prediction predicted[tiv], with the
    trigger in the value path (tiv True, circles) and out of it (False, squares); the attention
    accuracy att[True] as triangles, and the line d = V."""
    ax = axes(f"Hand-built transformer, random embeddings (V = {V}, L = {L}); mean over problems",
              "embedding dimension d (log scale)", "test accuracy", figsize=(6.5, 3.8), xscale="log")
    for tiv, marker, ls, where in ((True, "o", "-", "in"), (False, "s", "--", "not in")):
        measured_and_predicted(ax, dims, [a.mean() for a in acc[tiv]], predicted[tiv], "acc", f"accuracy (trigger {where} value path)",
                               f"predicted (trigger {where} value path)", marker=marker, linestyle=ls, theory_color="acc")
    ax.plot(dims, [a.mean() for a in att[True]], "^", color=COLORS["att_acc"], label="attention accuracy")
    ax.axvline(V, color="gray", ls=":", label="d = V")
    finish(ax)


def linear_coefficient_figure(c1_meas: dict, c1_theory) -> None:
    """Chapter 3: the measured linear Hermite coefficient c_1 of each sample against its scale s, one
    series per (mlp_input, attention) key of `c1_meas` (values: per-sample scales, c_1, standard
    errors), beside the curve c1_theory(s) = 3 s (s^2 - 1) / sqrt(6)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    s_grid = np.linspace(0.2, 1.8, 100)
    ax.plot(s_grid, c1_theory(s_grid), "-", color=COLORS["theory"], label=r"$3s(s^2-1)/\sqrt{6}$")
    for (mi, att), (s_, c_, _) in c1_meas.items():
        ax.plot(s_, c_, "o" if mi == "raw" else "s", ms=3, alpha=0.5, label=f"{mi} input, {att} attention",
                color=COLORS["acc" if att == "uniform" else "att_acc"] if mi == "raw" else COLORS["trained"])
    ax.axhline(0, color="gray", lw=0.5)
    ax.set_xlabel(r"scale $s$ of the pre-activations ($\|o\|$ for the raw input, 1 for the unit input)")
    ax.set_ylabel(r"linear Hermite coefficient $c_1$")
    ax.set_title(r"He$_3$ has a linear part unless its input has unit scale", fontsize=10)
    ax.legend(fontsize=7)
    show(fig)


def loglog_panel(ax, x, measured, predicted, names, colors: dict, xlabel: str, ylabel: str) -> dict:
    """One panel of a sweep: column j of `measured` (grid, series) as points labelled with its fitted
    log-log slope, column j of `predicted` as a line of the same colour (`colors[names[j]]`), the grid
    values as the x ticks. Returns {name: fitted slope}."""
    import matplotlib.pyplot as plt

    x, measured, predicted = list(x), np.asarray(measured, float), np.asarray(predicted, float)
    if measured.shape != (len(x), len(names)) or predicted.shape != measured.shape:
        raise ValueError(f"measured and predicted must have shape (len(x), len(names)) = {(len(x), len(names))}, "
                         f"got {measured.shape} and {predicted.shape}")
    slopes = {}
    for j, n in enumerate(names):
        slopes[n] = np.polyfit(np.log(x), np.log(measured[:, j]), 1)[0]
        ax.loglog(x, measured[:, j], "o", color=colors[n], label=f"{n} (slope {slopes[n]:.2f})")
        ax.loglog(x, predicted[:, j], "-", color=colors[n], alpha=0.7)
    ax.set_xlabel(xlabel)
    ax.set_xticks(x, [str(v) for v in x])
    ax.xaxis.set_minor_formatter(plt.NullFormatter())
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7, loc="best")
    return slopes


def attention_scores(ax, problem, test, k, title: str) -> None:
    """Chapter 5: the attention scores h_t . k of the sequences of `test` (one row each, divided by the
    row's largest absolute score, darker is higher), a red box on the informative position and a
    white dot on the attended one."""
    import matplotlib.pyplot as plt

    from .fast.tokens import position_scores

    s = position_scores(problem, test, k).numpy()
    s = s / np.abs(s).max(1, keepdims=True)
    ax.imshow(s, cmap="Greys", aspect="auto", vmin=-1, vmax=1)
    for r in range(s.shape[0]):
        ax.add_patch(plt.Rectangle((int(test.pos[r]) - 0.5, r - 0.5), 1, 1, fill=False, ec="red", lw=2))
        ax.plot(s[r].argmax(), r, "o", color="white", mec="black", ms=5)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("position t")
    ax.set_ylabel("test sequence")


def measured_with_interval(ax, x, per_problem, predicted, color, label, theory_label, linestyle="-",
                           theory_color=None):
    """Measurements over problems (per_problem: (problems, len(x))) as their mean with its 95 %
    Student-t interval as error bars, beside the curve that predicts them (`measured_and_predicted`;
    the prediction in the measurements' colour unless `theory_color` says otherwise). Returns the
    mean and the half-width of its interval, per x."""
    from .theory import t_interval

    mean, half = t_interval(per_problem)
    measured_and_predicted(ax, x, mean, predicted, color, label, theory_label, linestyle=linestyle,
                           theory_color=color if theory_color is None else theory_color)
    ax.errorbar(x, mean, yerr=half, fmt="none", color=COLORS.get(color, color), lw=0.8)
    return mean, half
