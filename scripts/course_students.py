"""The students an instructor's walk and the course tests grade: the correct student (`fill`: the
instructor's solutions typed into the released notebook), five who tamper with the grading (`CHEATS`,
`chapter_cheats`, `cheat_notebook`), one who guesses booleans (`GUESS`) and the shortcut student
(`SHORTCUTS`: for every derivation, code that gets the answer without deriving it). Used by
scripts/course_walk.py and tests/test_course.py, tests/test_course_pipeline.py; importing it runs nothing.
"""

import copy
import functools
import importlib.util
import pathlib

import nbformat
from nbgrader import utils as nbg_utils

_spec = importlib.util.spec_from_file_location("course", pathlib.Path(__file__).resolve().parent / "course.py")
course = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(course)

def fill(released, source, labels, answers=True):
    """The released notebook with the instructor's solutions typed in for the given exercises."""
    nb = copy.deepcopy(released)
    ref = course.exercise_cells(source)
    for c in nb.cells:
        gid = c.metadata.get("nbgrader", {}).get("grade_id", "")
        label = gid.rsplit("-", 1)[0]
        if label not in labels or not nbg_utils.is_solution(c):
            continue
        if c.cell_type == "code":
            c.source = course.SOLUTION_RE.search(ref[gid].source).group(1).strip("\n")
        elif answers:
            c.source = ref[gid].source
    return nb


# Students who tamper with grading (chapter 1; nothing, or wrong values, answered). Under nbgrader's own
# Execute each of them gained points (a, b: every check; c: the two checks that call lib.evaluate; d: the
# four float checks; e: the three checks that use abs); with the checks run in a clean process
# (scripts/course_guard.py) each scores 0 on every exercise.
# a float that passes every comparison, subtracts to 0 and counts down when converted: the class alone
MAGIC = ('class Magic(float):\n'
         '    _n = 1e6\n'
         '    def _true(self, other):\n'
         '        return True\n'
         '    __eq__ = __lt__ = __le__ = __gt__ = __ge__ = _true\n'
         '    __hash__ = float.__hash__\n'
         '    def __sub__(self, other):\n'
         '        return Magic(0.0)\n'
         '    __rsub__ = __sub__\n'
         '    def __abs__(self):\n'
         '        return Magic(0.0)\n'
         '    def __float__(self):\n'
         '        Magic._n -= 1\n'
         '        return Magic._n\n')
CHEATS = {
    "strip_input": ('import re\n'
                    'get_ipython().input_transformers_post.append(\n'
                    '    lambda lines: [re.sub(r"^(\\s*)assert\\b.*$", r"\\1pass", l) for l in lines])'),
    "strip_ast": ('import ast\n'
                  'class _NoAsserts(ast.NodeTransformer):\n'
                  '    def visit_Assert(self, node):\n'
                  '        return ast.Pass()\n'
                  'get_ipython().ast_transformers.append(_NoAsserts())'),
    "patch_lib": ('import types, lib\n'
                  'lib.evaluate = lambda *a, **k: types.SimpleNamespace(acc=1.0, att_acc=1.0, oracle_acc=0.5)\n'
                  'beta_min = 0.0\n'
                  'with_trig = without_trig = 0.5'),
    "magic_float": (MAGIC +
                    'beta_min, bayes_exact, with_trig, without_trig = Magic(4.0), Magic(0.9), Magic(0.5), Magic(0.5)\n'
                    'def keyed_bias_var(V, d):\n'
                    '    return Magic(1.0)\n'
                    'bias_beats_signal = False'),
    "patch_builtins": ('import builtins\n'
                       'builtins.abs = lambda x: 0.0\n'
                       'builtins.all = lambda iterable: True\n'
                       'beta_min, bayes_exact, with_trig, without_trig = 0.0, 0.5, 0.5, 0.5\n'
                       'def keyed_bias_var(V, d):\n'
                       '    return float(V)\n'
                       'bias_beats_signal = False'),
}


# A student who knows (or guesses) every boolean answer of chapter 1 and computes nothing: a boolean part is
# graded together with the quantity it is about (tests/test_course.py::test_no_check_is_one_boolean), so
# this student scores 0 too, in any kernel (no tampering: the control below leaves it out).
GUESS = {"guess_booleans": "below_bound = trigger_costs = bias_beats_signal = True   # right, not computed"}


def cheat_notebook(released, code):
    """The released chapter with its computations after the imports deleted (a student may delete
    cells), the exercises unanswered, and one cell of code after the imports."""
    nb = copy.deepcopy(released)
    first = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    nb.cells = [c for i, c in enumerate(nb.cells) if c.cell_type != "code" or i == first or "nbgrader" in c.metadata]
    nb.cells.insert(first + 1, nbformat.v4.new_code_cell(code))
    return nb


def solution_names(instructor) -> tuple[list[str], list[str]]:
    """(functions, variables): the public top-level names the chapter's solution code defines."""
    import ast
    funcs, names = set(), set()
    for c in instructor.cells:
        if c.cell_type != "code":
            continue
        for m in course.SOLUTION_RE.finditer(c.source):
            for node in ast.parse(m.group(1)).body:
                if isinstance(node, ast.FunctionDef):
                    funcs.add(node.name)
                elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                    for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                        names |= {x.id for x in ast.walk(t) if isinstance(x, ast.Name)}
    public = lambda s: sorted(x for x in s if not x.startswith("_"))       # noqa: E731
    return public(funcs), public(names - funcs)


def answers_code(funcs: list[str], names: list[str], value: str) -> str:
    """Lines that give every answer name `value` and make every answer function return it."""
    lines = [f"def {f}(*args, **kwargs):\n    return {value}" for f in funcs]
    lines += [f"{n} = {value}" for n in names]
    return "\n".join(lines)


def chapter_cheats(instructor) -> dict:
    """The five tampering students of CHEATS, for any chapter."""
    answers = functools.partial(answers_code, *solution_names(instructor))
    return {
        "strip_input": CHEATS["strip_input"],
        "strip_ast": CHEATS["strip_ast"],
        "patch_lib": ("import lib, lib.theory\n"
                      "for _m in (lib, lib.theory):\n"
                      "    for _k in dir(_m):\n"
                      "        if not _k.startswith('_') and callable(getattr(_m, _k)):\n"
                      "            setattr(_m, _k, lambda *a, **k: 1.0)\n" + answers("1.0")),
        "magic_float": MAGIC + answers("Magic(1.0)"),
        "patch_builtins": ("import builtins\n"
                           "builtins.abs = lambda x: 0.0\n"
                           "builtins.all = builtins.any = lambda iterable: True\n" + answers("0.5")),
    }


# derivation exercises: (function the solution defines, arguments), or (variable, None), whose values must not be
# findable: the arguments are the chapter's own parameters and those of the hidden tests; each function's first
# arguments are also tried on every lib formula
DERIVATIONS = {
    "ex-task-bayes": [("bayes_exact", None)],
    "ex-task-bias": [("keyed_bias_var", (64, 16)), ("keyed_bias_var", (512, 96)), ("keyed_bias_var", (512, 128))],
    "ex-int-sphere-margin": [("margin_var_sphere", (62, 64)), ("margin_var_sphere", (10, 16))],
    "ex-attention-kappa": [("gamma_needed", (128, 16, 128)), ("gamma_ratio_L", None)],
    "ex-attention-gaussian": [("gauss_att", (2.0, 32, 0.5)), ("r_star_half", None)],
    "ex-attention-dmin": [("d_min_tau", (16, 0.5))],
    "ex-attention-softmax": [("mean_odds", (3.0, 16, 64)), ("lam_odds", None)],
    "ex-mlp-shift": [("lin_power", (0.7,)), ("quad_power", (0.7,)), ("lin_power", (1.3,))],
    "ex-mlp-signal": [("kappa_var_scaled", (10, 0.8)), ("kappa_var_scaled", (1, 1.7)), ("rel_var_large_s", None)],
    "ex-fact-count": [("onto_bits", (16, 4, 8)), ("onto_bits", (6, 1, 4)), ("onto_min_params", (16, 4, 8, 32))],
    "ex-refined-mb-orth": [("var_bias_gap", (64, 300, 0.7)), ("corr_biases", None)],
    "ex-refined-key-var": [("var_key_orth", (128, 64, 1.0)), ("var_key_orth", (6, 20, 2.5)), ("share_from_overlaps", None)],
    "ex-capacity-wall-factor": [("d_min", (128, 0.1)), ("d_min", (64, 0.3))],
    "ex-capacity-coverage": [("n_cov2", (256, 0.99)), ("n_cov2", (20, 0.9))],
    "ex-train-adam-first": [("kq_second_ratio", None)],
    "ex-train-entropy-gap": [("entropy_slope", (2.5, 16)), ("entropy_slope", (7.0, 64)), ("gap_steepest", None)],
    "ex-value-count-factor": [("count_cross", (30, 20)), ("count_cross", (8192, 128)), ("count_third", (200, 7)),
                              ("count_third", (8192, 128))],
    "ex-value-signal-var": [("seen_signal_var", (500, 16, 50)), ("seen_signal_var", (8192, 64, 128)),
                            ("seen_signal_var", (256, 256, 256))],
    "ex-value-coverage": [("n_all_seen", (256,)), ("n_all_seen", (128,)), ("n_all_seen", (1000,))],
    "ex-lb-errors": [("table_bits", (30, 4, 3)), ("table_bits", (200, 8, 20))],
    "ex-lb-bayes": [("best_exact", (27, 32)), ("expected_exact", (100, 32)), ("expected_exact", (200, 32))],
    "ex-lb-product": [("d_twice", (64, 3.0)), ("d_twice", (128, 4.0))],
    "ex-lb-pairs": [("no_self_root", (1.0, 50.0, 0.01)), ("no_self_root", (2.0, 900.0, 0.005))],
}
SOLUTION_PRELUDE = "import math\nimport numpy as np\nimport torch\nimport lib\nfrom lib import theory\nfrom lib.theory import *\n"


# ---------------------------------------------------------------------------------------------------------------
# The shortcut student: for every derivation, code that defines the exercise's answers without deriving them, the
# way a strong student who skips the derivation would (brute force where it is feasible, a simulation, numerical
# integration or differentiation, a root found numerically on the chapter's formula or on a lib function, torch's
# own optimizer), each as good as it can be made while staying cheap. None of them may earn the exercise's full
# marks: a hidden test checks the answer where brute force is infeasible, or by its form. A "#variant" key is
# another shortcut for the same exercise. The holes found are marked xfail in SHORTCUT_HOLES.

# Gauss-Hermite nodes and weights for E over N(0, 1), exact for polynomials up to degree 79
_HERMITE = "_x, _w = np.polynomial.hermite_e.hermegauss(40)\n_w = _w / _w.sum()\n"
# the Monte Carlo shortcut of ex-attention-gaussian: n draws of (X_0, U), optionally paired, then bisection
_MC_GAUSS = """
import functools
_g = lib.torch_generator(0)
_X0 = torch.randn({n}, generator=_g, dtype=torch.float64)
_U = torch.rand({n}, generator=_g, dtype=torch.float64)
{pair}
_max = functools.lru_cache(None)(lambda L: torch.special.ndtri(_U ** (1 / (L - 1))))

def gauss_att(r, L, rho):
    return float((r + rho * _X0 > _max(L)).double().mean())

lo, hi = 0.0, 20.0
for _ in range(60):
    mid = (lo + hi) / 2
    lo, hi = (mid, hi) if gauss_att(mid, 32, 0.5) < 0.99 else (lo, mid)
r_star_half = (lo + hi) / 2
"""
SHORTCUTS = {
    # the sampled estimate the statement names, on a large sample, instead of the enumeration
    "ex-task-bayes": """
from lib.analysis.construct import bayes_accuracy_unmarked
bayes_exact = float(bayes_accuracy_unmarked(
    lib.sample_batch(lib.make_problem(lib.TaskConfig(V=3, d=3, L=4), 0), 1_000_000, 0), 3))
""",
    # Monte Carlo of b'_k at the arguments (Pi* the identity, which changes no law), 400 draws of everything
    "ex-task-bias": """
def keyed_bias_var(V, d):
    g, tot, n = lib.torch_generator(0), 0.0, 0
    for _ in range(8):
        E, U = (torch.randn(50, V, d, generator=g, dtype=torch.float64) / d ** 0.5 for _ in range(2))
        z = torch.randn(50, d, 1, generator=g, dtype=torch.float64) / d ** 0.5
        b = U @ (U.transpose(1, 2) @ ((E + z.transpose(1, 2)) @ z))      # b'_k = sum_j (u_k . u_j) (e_j + z) . z
        tot, n = tot + float((b ** 2).sum()), n + b.numel()
    return tot / n

bias_beats_signal = keyed_bias_var(512, 96) ** 0.5 > 1
""",
    # Monte Carlo of the margin xi_0 - xi_1 on the sphere at the arguments, 2000 memories
    "ex-int-sphere-margin": """
def margin_var_sphere(n, d):
    g, out = lib.torch_generator(0), []
    for _ in range(10):
        E, U = (torch.randn(200, n, d, generator=g, dtype=torch.float64) for _ in range(2))
        E, U = E / E.norm(dim=2, keepdim=True), U / U.norm(dim=2, keepdim=True)
        We = U.transpose(1, 2) @ (E @ E[:, 0, :, None])                   # W e_0, W = sum_x u_x e_x^T
        out.append(((U[:, 0] - U[:, 1])[:, None, :] @ We).flatten())
    return float(torch.cat(out).var())

sphere_margin_smaller = margin_var_sphere(62, 64) < 6 / 64 + (2 * 62 + 5) / 64 ** 2
""",
    # the heuristic's smaller root by bisection on lib's own mean weight, the score scale kappa from lib
    "ex-attention-kappa": """
def gamma_needed(V, L, d):
    lo, hi = 0.0, float(d)                       # the mean weight rises up to lam = d: the smaller root is below
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if softmax_focus(mid, L, d) < 0.99 else (lo, mid)
    return float((lo + hi) / 2 / (0.01 * trigger_score_scale(V, L)))

gamma_ratio_L = gamma_needed(128, 32, 128) / gamma_needed(128, 16, 128)
""",
    # Monte Carlo of the event itself (the max of L - 1 normals drawn as Phi^-1(U^(1/(L-1)))), 2 million draws
    # with one seed, and r_star_half by bisection on it
    "ex-attention-gaussian": _MC_GAUSS.format(n="2_000_000", pair=""),
    # the same with 8 million antithetic draws, (X_0, U) and (-X_0, 1 - U), which make two exchangeable scores an
    # exact coin flip
    "ex-attention-gaussian#antithetic": _MC_GAUSS.format(
        n="4_000_000", pair="_X0, _U = torch.cat([_X0, -_X0]), torch.cat([_U, 1 - _U])"),
    # brute force: the smallest d at which k_inf's exact accuracy (lib, 16 problems, V = 128 as the chapter's
    # figure) passes 0.99, found by bisection over the integers
    "ex-attention-dmin": """
def d_min_tau(L, tau):
    ok = lambda d: float(np.mean(step2.population_accuracy(128, [d], L, 16, tau=tau)[0][0])) > 0.99
    lo, hi = 1, 2
    while not ok(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if not ok(mid) else (lo, mid)
    return float(hi)

wall_falls_with_tau = d_min_tau(16, 0.7) < d_min_tau(16, 0.5)
""",
    # the chapter's formula with the trigger's norm put in: population_min_d says r_inf = |z| sqrt(d), so with
    # |z_trig| = tau the wall is r*(L)^2 / tau^2 (the scaling of the bonus and of the spread is not derived)
    "ex-attention-dmin#plug-in": """
def d_min_tau(L, tau):
    return population_min_d(L) / tau ** 2

wall_falls_with_tau = True
""",
    # numerical integration: the odds (L - 1) E exp(lam (X_1 - 1 - X_0)) by Gauss-Hermite quadrature in X_0 and
    # X_1 (150 nodes each), lam_odds by bisection on it
    "ex-attention-softmax": """
_xq, _wq = np.polynomial.hermite_e.hermegauss(150)
_wq = _wq / _wq.sum()

def mean_odds(lam, L, d):
    lam = np.asarray(lam, float)[..., None, None]
    x0, x1 = _xq[:, None] / d ** 0.5, _xq[None, :] / d ** 0.5
    return (L - 1) * (_wq[:, None] * _wq[None, :] * np.exp(lam * (x1 - 1 - x0))).sum((-1, -2))

lo, hi = 0.0, 50.0
for _ in range(60):
    mid = (lo + hi) / 2
    lo, hi = (mid, hi) if mean_odds(mid, 64, 128) > 1 / 99 else (lo, mid)
lam_odds = (lo + hi) / 2
""",
    # numerical integration: Gauss-Hermite in g for a_k(b), then in b ~ N(0, s^2)
    "ex-mlp-shift": _HERMITE + """
def _a(b, k):
    sig = ((_x + b) ** 3 - 3 * (_x + b)) / math.sqrt(6)
    return float((_w * sig * [_x, _x ** 2 - 1][k - 1]).sum()) / math.sqrt(math.factorial(k))

def lin_power(s):
    return float(sum(wb * _a(s * xb, 1) ** 2 for xb, wb in zip(_x, _w)))

def quad_power(s):
    return float(sum(wb * _a(s * xb, 2) ** 2 for xb, wb in zip(_x, _w)))
""",
    # numerical integration of Var sigma(s g)^2 by Gauss-Hermite, and the limit read off at s = 10^6
    "ex-mlp-signal": _HERMITE + """
def kappa_var_scaled(m, s):
    sq = ((s * _x) ** 2 - 1) ** 2 / 2
    return float((_w * sq ** 2).sum() - (_w * sq).sum() ** 2) / m

_sq = ((1e6 * _x) ** 2 - 1) ** 2 / 2
rel_var_large_s = float(kappa_var_scaled(1, 1e6) / (_w * _sq).sum() ** 2)
""",
    # brute force: the exact law of (n_k, n_l), a trinomial, summed at the arguments
    "ex-refined-mb-orth": """
def _pair_law(V, N):
    a = torch.arange(N + 1, dtype=torch.float64)
    A, B = a[:, None], a[None, :]
    C = (N - A - B).clamp(min=0)
    logp = (math.lgamma(N + 1) - torch.lgamma(A + 1) - torch.lgamma(B + 1) - torch.lgamma(C + 1)
            + (A + B) * math.log(1 / V) + C * (math.log(1 - 2 / V) if V > 2 else 0.0))
    return torch.where(A + B <= N, logp.exp(), torch.zeros(())), A / N, B / N

def var_bias_gap(V, N, tau):
    p, gk, gl = _pair_law(V, N)
    gap = tau ** 2 * (gk - gl)
    return float((p * gap ** 2).sum() - (p * gap).sum() ** 2)

_p, _gk, _gl = _pair_law(64, 300)
_cov = float((_p * _gk * _gl).sum() - (_p * _gk).sum() * (_p * _gl).sum())
corr_biases = _cov / float((_p * _gk ** 2).sum() - (_p * _gk).sum() ** 2)
""",
    # Monte Carlo with lib's sampler of the term (the chapter's key_term_samples), about 2e7 numbers a call; it
    # needs d >= V (V orthonormal outputs), so the share at d = 64 < V is scaled from d = 128 by the 1/d of e . s
    "ex-refined-key-var": """
def var_key_orth(V, d, s2):
    return float(key_term_samples(V, d, s2, max(2, int(2e7 / (V * d))), lib.torch_generator(0)).var())

gauss = ((1 + 2 / 64) / 64 + 127 / 64 ** 2) / 128 ** 2
share_from_overlaps = 1 - var_key_orth(128, 128, 1.0) * 128 / 64 / gauss
""",
    # brute force on the chapter's own quantities: the smallest integer d at which (N_att + beta) / leading is
    # within 1 + eps (bisection; attention_nstar takes integer d only)
    "ex-capacity-wall-factor": """
def d_min(L, eps, V=32):
    inside = lambda d: (attention_nstar(V, d, L) + trigger_self_bias(V, d, L)) / leading(V, d, L) <= 1 + eps
    lo = int(critical_snr(L) ** 2)               # at the wall and below, N_att is infinite
    hi = 2 * lo
    while not inside(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if not inside(mid) else (lo, mid)
    return float(hi)

d_min_grows_like_rstar2 = True
""",
    # the exact accuracy P(n >= 2) summed at integer N, the real N by linear interpolation between the two
    # integers around the threshold
    "ex-capacity-coverage": """
def n_cov2(V, threshold):
    acc = lambda N: 1 - sum(math.comb(N, k) * (1 / V) ** k * (1 - 1 / V) ** (N - k) for k in range(min(N, 1) + 1))
    N = 0
    while acc(N) < threshold:
        N += 1
    lo, hi = acc(N - 1), acc(N)
    return float(N - 1 + (threshold - lo) / (hi - lo))

all_seen_needs_more = bool(lib.theory.coupon_collector(256)[0] > n_cov2(256, 0.99))
""",
    # brute force: every map of the S subjects to the D answers enumerated, the onto ones counted
    "ex-fact-count": """
import itertools

def _onto(S, D):
    return sum(1 for t in itertools.product(range(D), repeat=S) if len(set(t)) == D)

def onto_bits(S, R, D):
    return R * math.log2(_onto(S, D))

def onto_min_params(S, R, D, b):
    n, p = _onto(S, D) ** R, 1
    while 2 ** (b * p) < n:
        p += 1
    return p
""",
    # brute force where it is feasible: the learner outputs one of the permutations consistent with the seen
    # pairs, listed; past 9 unseen tokens, lib's simulation of the look-up-and-guess learner; the law of S
    # from lib (as the statement offers)
    "ex-lb-bayes": """
import functools
import itertools
from lib.analysis.lowerbound import seen_distribution
from lib.analysis.lowerbound_checks import lookup_guess_accuracies

@functools.lru_cache(None)
def _simulated(V):
    return [float(np.mean(np.array(a) == 1.0)) for a in lookup_guess_accuracies(V, 1000, 0)]

@functools.lru_cache(None)
def best_exact(S, V):
    if V - S <= 9:
        return 1 / sum(1 for _ in itertools.permutations(range(V - S)))
    return _simulated(V)[S]

def expected_exact(N, V):
    return float(seen_distribution(N, V) @ np.array([best_exact(S, V) for S in range(V + 1)]))

n_exact_half = next(N for N in range(1, 10 ** 4) if expected_exact(N, 32) >= 0.5)
""",
    # brute force: the ball of k errors counted by listing every way to get j <= k answers wrong; V_fit_table
    # scanned as far as that runs (V <= 30)
    "ex-lb-errors": """
import itertools

def table_bits(V, D, k):
    ball = sum(1 for j in range(min(k, V) + 1) for _ in itertools.combinations(range(V), j)
               for _ in itertools.product(range(D - 1), repeat=j))
    return V * math.log2(D) - math.log2(ball)

V_fit_table = max(V for V in range(1, 31) if table_bits(V, 4, V // 10) <= 64)
""",
    # the statement's formula transcribed (L = 32, as the book's table), the real d found by bisection
    "ex-lb-product": """
def d_twice(V, rstar, L=32):
    lam = lambda d: (V - d) * (V + d) / (V * d * d)
    trade = lambda d: V ** 2 / (1 / rstar ** 2 - lam(d)) if 1 / rstar ** 2 > lam(d) else math.inf   # N d^2/(L-1)
    lo, hi = 1e-9, float(V)
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if trade(mid) > 2 * V ** 2 * rstar ** 2 else (lo, mid)
    return hi

d_twice_int = math.ceil(d_twice(64, 3.0))
""",
    # the theorem's quadratic at w_= = 0 (lib's member_noise with B = 0: the evenly spread member), transcribed
    # for real N, and its root found by bisection
    "ex-lb-pairs": """
def no_self_root(psi, pi, q):
    noise = lambda N: psi / N + (pi - psi) / (N * (N - 1))
    lo, hi = 1.0, 2.0
    while noise(hi) > q:
        lo, hi = hi, 2 * hi
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if noise(mid) > q else (lo, mid)
    return float(hi)

n_no_self = math.ceil(no_self_root(1.2, 600.0, 0.02))
""",
    # torch's own Adam, stepped twice from zero with the two gradients; the ratio read off a step (eps ~ 0)
    "ex-train-adam-first": """
def adam_second_step(g1, g2, lr, betas=(0.9, 0.999), eps=1e-8):
    p = torch.zeros_like(g1, requires_grad=True)
    opt = torch.optim.Adam([p], lr=lr, betas=betas, eps=eps)
    for g in (g1, g2):
        before = p.detach().clone()
        p.grad = g.detach().clone()
        opt.step()
    return p.detach() - before

_zero, _one = torch.zeros(1, dtype=torch.float64), torch.ones(1, dtype=torch.float64)
kq_second_ratio = float(adam_second_step(_zero, _one, 1.0, eps=1e-300).abs())
""",
    # automatic differentiation of the entropy torch computes; the steepest gap by bisection on the second
    # derivative (also by autograd), bracketed on a grid
    "ex-train-entropy-gap": """
def _entropy(b, L):
    scores = torch.cat([b.reshape(1), torch.zeros(L - 1, dtype=torch.float64)])
    return torch.special.entr(torch.softmax(scores, 0)).sum()

def _derivs(b, L):
    x = torch.tensor(float(b), dtype=torch.float64, requires_grad=True)
    d1, = torch.autograd.grad(_entropy(x, L), x, create_graph=True)
    d2, = torch.autograd.grad(d1, x)
    return float(d1.detach()), float(d2)

def entropy_slope(b, L):
    return _derivs(b, L)[0]

_grid = np.arange(0.0, 60.0, 0.5)
lo_ = float(_grid[int(np.argmin([entropy_slope(b, 128) for b in _grid]))]) - 0.5
hi_ = lo_ + 1.0                                  # the second derivative changes sign in between
for _ in range(200):
    mid_ = (lo_ + hi_) / 2
    lo_, hi_ = (mid_, hi_) if _derivs(mid_, 128)[1] < 0 else (lo_, mid_)
gap_steepest = (lo_ + hi_) / 2
""",
    # brute force: the exact moments summed over the multinomial's support at the arguments (the probabilities
    # in logs, so that no factorial overflows)
    "ex-value-count-factor": """
_lf = lambda n: math.lgamma(n + 1)

def count_cross(N, V):
    lq = math.log(1 - 2 / V) if V > 2 else -math.inf
    return sum(math.exp(_lf(N) - _lf(a) - _lf(b) - _lf(N - a - b) + (a + b) * math.log(1 / V)
                        + ((N - a - b) * lq if N - a - b else 0.0)) * (V * a / N) * (V * b / N)
               for a in range(1, N + 1) for b in range(1, N + 1 - a))

def count_third(N, V):
    return sum(math.exp(_lf(N) - _lf(k) - _lf(N - k) + k * math.log(1 / V) + (N - k) * math.log(1 - 1 / V))
               * (V * k / N) ** 3 for k in range(N + 1))
""",
    # the exact sums where they are cheap, the large-sample limit 1 everywhere else: no derivation, and right to
    # 1e-6 at any size the visible checks use; the checks call the functions on sympy symbols (a branch on a
    # symbol raises) and compare at 60 digits, where the limit is off by 1 / N
    "ex-value-count-factor#branch": """
def count_cross(N, V):
    if N > 60:
        return 1.0
    return sum(math.factorial(N) / (math.factorial(a) * math.factorial(b) * math.factorial(N - a - b))
               * (1 / V) ** (a + b) * (1 - 2 / V) ** (N - a - b) * (V * a / N) * (V * b / N)
               for a in range(N + 1) for b in range(N + 1 - a))

def count_third(N, V):
    if N > 10 ** 5:
        return 1.0
    return sum(math.comb(N, k) * (1 / V) ** k * (1 - 1 / V) ** (N - k) * (V * k / N) ** 3 for k in range(N + 1))
""",
    # brute force: the exact conditional moments summed over the binomial's support at the arguments (in logs)
    # a sum over a window of +- (40 standard deviations + 40) around the binomial mean (scipy's pmf, vectorised):
    # exact to round-off at any size (the mass outside the window is below float64's resolution), so only the
    # answer's form stops it: the checks call the function on sympy symbols
    "ex-value-signal-var#window": """
from scipy.stats import binom

def seen_signal_var(N, d, V):
    mu, sd = N / V, math.sqrt(N / V * (1 - 1 / V))
    k = np.arange(max(1, math.floor(mu - 40 * sd - 40)), min(N, math.ceil(mu + 40 * sd + 40)) + 1, dtype=float)
    w = binom.pmf(k, N, 1 / V)
    m1, m2 = (w * V * k / N).sum() / w.sum(), (w * (V * k / N) ** 2).sum() / w.sum()
    return float(m2 * (1 + 2 / d) ** 2 - m1 ** 2)

seen_is_smaller = True
""",
    "ex-value-signal-var": """
def _moments(N, V, first):
    lf = lambda n: math.lgamma(n + 1)
    w = [math.exp(lf(N) - lf(k) - lf(N - k) + k * math.log(1 / V) + (N - k) * math.log(1 - 1 / V))
         for k in range(first, N + 1)]
    m1 = sum(wk * V * k / N for k, wk in zip(range(first, N + 1), w)) / sum(w)
    m2 = sum(wk * (V * k / N) ** 2 for k, wk in zip(range(first, N + 1), w)) / sum(w)
    return m1, m2

def seen_signal_var(N, d, V):
    m1, m2 = _moments(N, V, 1)
    return m2 * (1 + 2 / d) ** 2 - m1 ** 2

_m1, _m2 = _moments(256, 256, 0)
seen_is_smaller = seen_signal_var(256, 256, 256) < _m2 * (1 + 2 / 256) ** 2 - _m1 ** 2
""",
    # search on lib's expected coverage (prop-coverage): the smallest N with at most 1/2 token unseen, by
    # doubling then bisection over the integers; the real N_star by bisection on the chapter's formula; the trend
    # read off V up to 10^6
    "ex-value-coverage": """
def n_star(V):
    unseen = lambda N: V * (1 - 1 / V) ** N
    lo, hi = 0.0, 1.0
    while unseen(hi) > 0.5:
        lo, hi = hi, 2 * hi
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if unseen(mid) > 0.5 else (lo, mid)
    return hi

def n_all_seen(V):
    unseen = lambda N: V - coverage_mean(N, V)
    lo, hi = 0, 1
    while unseen(hi) > 0.5:
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if unseen(mid) > 0.5 else (lo, mid)
    return hi

_ratios = [n_all_seen(V) / V for V in (10 ** 3, 10 ** 4, 10 ** 5, 10 ** 6)]
all_seen_linear = bool(max(_ratios) - min(_ratios) < 0.1)
""",
}
