"""Configuration of one recall problem, validated once at construction.

`TaskConfig` holds every switch of the book's notation table (chapter 1) and models (chapter 3):
sizes (V, d, L, m), how embeddings are drawn, where the trigger goes, which model (a registered
feature map, `lib.core.featuremaps`), activation and MLP input normalisation, and the numeric
dtype/device. Every chapter builds one of these first.

The small `check_*` helpers are the one place where arguments are validated, so that every public
function and CLI flag fails with the same kind of message: `ValueError: d must be a positive
integer, got 0`.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, replace

import torch

from . import featuremaps

MODELS = tuple(featuremaps.REGISTRY)              # registered feature maps: "attn", "mlp", ...
EMBEDDINGS = ("gaussian", "sphere", "orthogonal")
ACTIVATIONS = tuple(featuremaps.ACTIVATIONS)      # the one list of activation names
MLP_INPUTS = tuple(featuremaps.MLP_INPUTS)        # "unit" (o / |o|) or "raw" (o)
DTYPES = {"float32": torch.float32, "float64": torch.float64}


# ----------------------------------------------------------------------------- validation helpers

def check_int(name: str, value, minimum: int = 1) -> int:
    """Return `value` as an int, or raise a ValueError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return int(value)


def check_float(name: str, value, minimum: float | None = None, maximum: float | None = None,
                strict_min: bool = False) -> float:
    """Return `value` as a finite float in [minimum, maximum] (or (minimum, ...] if strict)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if minimum is not None and (value < minimum or (strict_min and value == minimum)):
        op = ">" if strict_min else ">="
        raise ValueError(f"{name} must be {op} {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value!r}")
    return value


def check_choice(name: str, value, choices) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(str, choices))}; got {value!r}")
    return value


def check_bool(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


def available_memory(device="cpu") -> int | None:
    """Bytes this process may still allocate on `device`: MemAvailable of /proc/meminfo on a Linux CPU,
    the free memory of a CUDA device; None where it cannot be read (then nothing is refused)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        try:
            return int(torch.cuda.mem_get_info(dev)[0])
        except Exception:
            return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_memory(name: str, value, nbytes: float, what: str, device="cpu") -> None:
    """Refuse, with a ValueError naming the parameter, an allocation of about `nbytes` for `what`
    that cannot fit in the memory still available: before it is attempted, not after."""
    avail = available_memory(device)
    if avail is not None and nbytes > avail:
        raise ValueError(f"{name} = {value} needs about {nbytes / 2 ** 30:.3g} GiB for {what}, more than the "
                         f"{avail / 2 ** 30:.3g} GiB of memory available")


def default_device() -> str:
    """CUDA when present, else CPU: every function takes its device from the config."""
    return "cuda" if torch.cuda.is_available() else "cpu"


# ----------------------------------------------------------------------------- the configuration

@dataclass(frozen=True)
class TaskConfig:
    """One recall problem: sizes, switches, numerics. Defaults follow the book's notation table (chapter 1)."""

    V: int                                # vocabulary size: tokens and labels live in [V]
    d: int                                # embedding dimension (d < V is the interesting case)
    L: int                                # sequence length (content positions)
    model: str = "attn"                   # "attn": logits U^T W_V o;  "mlp": U^T W_V sigma(F o)/sqrt(m)
    m: int | None = None                  # MLP width (required iff model == "mlp")
    activation: str = "he3"               # MLP sigma: normalised centred Hermite He_k, relu, centred_relu
    mlp_input: str = "unit"               # MLP reads sigma(F o/|o|) ("unit": pre-activations N(0,1)) or sigma(F o) ("raw")
    embedding: str = "gaussian"           # e, u, z drawn i.i.d. N(0, I/d) | unit sphere | orthonormal
    tied: bool = False                    # u_k = e_k (output embeddings tied to input embeddings)
    tau: float = 1.0                      # trigger scale: z_trig = tau * z
    trigger_in_value: bool = True         # does z_trig enter the value path o = sum_t a_t v_t?
    eos_key: bool = False                 # is z_EOS also a key (an extra position L+1)?
    noise_vocab: int | None = None        # size of a separate noise vocabulary ([NLB]); None: shared
    dtype: str = "float32"                # "float32" for speed, "float64" for exactness checks
    device: str = field(default_factory=default_device)  # "cuda" if present, else "cpu"

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "V", check_int("V", self.V, 2))
        set_(self, "d", check_int("d", self.d, 1))
        set_(self, "L", check_int("L", self.L, 1))
        check_choice("model", self.model, tuple(featuremaps.REGISTRY))
        check_choice("activation", self.activation, ACTIVATIONS)
        check_choice("mlp_input", self.mlp_input, MLP_INPUTS)
        check_choice("embedding", self.embedding, EMBEDDINGS)
        check_bool("tied", self.tied)
        check_bool("trigger_in_value", self.trigger_in_value)
        check_bool("eos_key", self.eos_key)
        set_(self, "tau", check_float("tau", self.tau, 0.0, 1e6))
        check_choice("dtype", self.dtype, tuple(DTYPES))
        if featuremaps.REGISTRY[self.model].needs_m:
            if self.m is None:
                raise ValueError(f"m (MLP width) is required when model={self.model!r}")
            set_(self, "m", check_int("m", self.m, 1))
        elif self.m is not None:
            set_(self, "m", check_int("m", self.m, 1))
        if self.noise_vocab is not None:
            set_(self, "noise_vocab", check_int("noise_vocab", self.noise_vocab, 1))
        if self.embedding == "orthogonal" and self.d < self.n_vectors:
            raise ValueError(
                f"d must be >= {self.n_vectors} for exactly orthogonal embeddings "
                f"(V={self.V}{'' if self.tied else ' inputs + V outputs'} + trigger + EOS"
                f"{' + noise vocabulary' if self.noise_vocab else ''}), got {self.d}")
        if not isinstance(self.device, str):
            raise ValueError(f"device must be a string such as 'cpu' or 'cuda', got {self.device!r}")
        try:
            torch.empty(0, device=self.device)
        except Exception as err:  # unknown or unavailable device
            raise ValueError(f"device {self.device!r} is not available: {err}") from None

    # ---- derived sizes
    @property
    def n_vectors(self) -> int:
        """How many random vectors one problem draws (orthogonal mode needs d >= this)."""
        return self.V * (1 if self.tied else 2) + 2 + (self.noise_vocab or 0)

    @property
    def V_in(self) -> int:
        """Size of the input table: the V content tokens, then the noise tokens if separate."""
        return self.V + (self.noise_vocab or 0)

    @property
    def n_keys(self) -> int:
        """Number of attended positions: L, or L + 1 when z_EOS is also a key."""
        return self.L + int(self.eos_key)

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def width(self) -> int:
        """Number of columns of the value matrix W_V: d (attn) or m (mlp)."""
        return featuremaps.REGISTRY[self.model].widths(self.d, self.m)[0]

    @property
    def n_frozen(self) -> int:
        """Number of frozen parameters of the model (m d for the MLP's F, 0 for attn)."""
        return featuremaps.REGISTRY[self.model].widths(self.d, self.m)[1]

    def with_(self, **changes) -> "TaskConfig":
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)
