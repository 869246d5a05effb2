"""The lossless method and window that decode fastest on this machine: ``--method auto``, the CLI's
default, so that a user who sets nothing is never handed a window the device cannot afford.

Jacobi decoding trades compute for forward passes. On a GPU a 64-token block costs about one
single-token forward, so long windows win; on two CPU cores a 32-token block costs several, and
the embedded model's best lossless method at window 32 runs at half the plain loop's speed. What
wins depends on the device, the thread count, the dtype and the sampling (a guided sequence runs
its cond/uncond pair, two rows, through every forward).

So the choice is measured, once per (model, device, dtype, threads, sampling), and cached on disk:

- the forward cost curve: seconds of one forward per block size, with the sampling's row count;
- one pilot image per candidate (the model's first example prompt, seed 0): its forward passes
  and the bookkeeping per iteration (wall time outside the forward).

The predicted seconds per image of a candidate are ``NFE x (cost(block) + bookkeeping)``; the
choice is the lowest, ``ar`` included when nothing beats it. Only lossless methods are
candidates: the choice changes the speed, never the distribution.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..core.contract import model_device
from ..core.errors import ConfigError, OutputError
from ..decode.methods import get_method, parse_variant
from ..models.bundle import ModelBundle
from .costs import block_size, forward_cost_curve, interpolate
from .files import atomic_write

METHODS = ("scd-gs", "scd-mc", "sjd-pac")  # the lossless presets auto weighs beside ar
WINDOWS = (8, 16, 32, 64)
VERSION = 1  # of the cache's records: a change of what a record holds starts them afresh


def unbuildable(variant, window: int) -> str | None:
    """Why the variant's parts do not build at this window (None: they do)."""
    try:
        variant.build(window)
    except ConfigError as e:
        return str(e)
    return None


def label(method: str, window: int) -> str:
    """A candidate's key in the cache and in ``Choice.predicted``."""
    return f"{method}@{window}"


def candidates(method: str = "auto", window: int | None = None) -> list[tuple[str, int]]:
    """(method, window) pairs to weigh: ``method`` "auto" weighs ``METHODS`` and ``ar``, a method
    of its own weighs only itself; ``window`` None weighs ``WINDOWS``, a number only that window."""
    names = ["ar", *METHODS] if method == "auto" else [method]
    out = []
    for name in names:
        variant = parse_variant(name)
        if variant.window is not None:  # ar: window 1 always
            out.append((variant.label, variant.window))
            continue
        out += [(variant.label, w) for w in ([window] if window else WINDOWS) if unbuildable(variant, w) is None]
    if not out:
        raise ConfigError(f"method {method!r} builds at none of the windows {window or WINDOWS}")
    return out


@dataclass(frozen=True)
class Pilot:
    """One image decoded with a candidate: forward passes, block size, bookkeeping seconds per
    iteration (wall time outside the forward) and wall seconds."""

    nfe: int
    block: int
    bookkeeping: float
    seconds: float


@dataclass(frozen=True)
class Choice:
    """The chosen (method, window), its predicted seconds per image and ``ar``'s, and every
    candidate's prediction."""

    method: str
    window: int
    seconds: float
    ar_seconds: float
    predicted: dict  # "method@window" -> predicted seconds per image
    calibrated: bool  # whether this call measured anything (False: all from the cache)

    @property
    def speedup(self) -> float:
        """Predicted speedup over ``ar`` on this machine."""
        return self.ar_seconds / self.seconds


def cache_file() -> Path:
    """``$JACOBIGEN_CACHE/calibration.json`` (default ``$XDG_CACHE_HOME/jacobigen`` or
    ``~/.cache/jacobigen``)."""
    root = (
        os.environ.get("JACOBIGEN_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "jacobigen"
    )
    return Path(root) / "calibration.json"


def machine_key(bundle: ModelBundle, sampling: dict) -> str:
    """What a calibration holds for: the model (name, size and a checksum of its first weights), the
    device, dtype, torch threads and version, the layout's length and the sampling."""
    params = list(bundle.model.parameters())
    first = params[0].detach().flatten()[:4096].double().sum().item()
    device = model_device(bundle.model)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    parts = [
        f"v{VERSION}",
        bundle.name,
        f"{sum(p.numel() for p in params)}p",
        f"{first:.6e}",
        name,
        str(params[0].dtype),
        f"threads={torch.get_num_threads()}",
        f"torch={torch.__version__}",
        f"length={bundle.layout.length}",
        json.dumps({k: sampling[k] for k in sorted(sampling)}),
    ]
    return " | ".join(parts)


def _load(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # none yet, or unreadable: calibrate afresh
    return data if isinstance(data, dict) else {}


def _pilot(bundle: ModelBundle, method: str, window: int, sampling: dict) -> Pilot:
    gen, _ = bundle.generate(
        bundle.example_prompts[:1], method=method, window=window, seed=[0], timing=True, **sampling
    )
    s = gen.stats
    parts = get_method(method).build(window)
    bookkeeping = (s.wall_time - (s.forward_time or 0.0)) / s.nfe
    return Pilot(s.nfe, block_size(parts, bundle.layout), bookkeeping, s.wall_time)


def choose(
    bundle: ModelBundle,
    method: str = "auto",
    window: int | None = None,
    cache: Path | None = None,
    progress: bool = False,
    **sampling,
) -> Choice:
    """The candidate (:func:`candidates`) with the lowest predicted seconds per image; what is not in
    ``cache`` (a calibration file, None: measure everything now and keep nothing) is measured and
    added to it. ``sampling`` overrides the bundle's defaults, as in ``bundle.generate``."""
    if not bundle.example_prompts:
        raise ConfigError(f"the {bundle.name} model has no example prompt to calibrate on: give --method and --window")
    sampling = {k: v for k, v in {**bundle.defaults, **sampling}.items() if v is not None}
    chosen = candidates(method, window)
    pairs = list(dict.fromkeys([*chosen, ("ar", 1)]))  # the speedup is against ar
    key = machine_key(bundle, sampling)
    store = _load(cache) if cache else {}
    record = store.get(key, {})
    pilots = {k: Pilot(**v) for k, v in record.get("pilots", {}).items()}
    todo = [(m, w) for m, w in pairs if label(m, w) not in pilots]
    if todo:
        bundle.generate(bundle.example_prompts[:1], method="ar", seed=[0], **sampling)  # warm-up: not timed
        for m, w in tqdm(todo, disable=not progress, desc="calibrating (once for this model and machine)"):
            pilots[label(m, w)] = _pilot(bundle, m, w, sampling)
    curve = {int(k): v for k, v in record.get("curve", {}).items()}
    missing = sorted({1, *(p.block for p in pilots.values())} - set(curve))
    if missing:
        guided = sampling.get("cfg", 1.0) != 1.0
        curve.update(forward_cost_curve(bundle.model, missing, rows=2 if guided else 1))
    if cache and (todo or missing):
        store[key] = {
            "measured": time.strftime("%Y-%m-%d %H:%M:%S"),
            "curve": curve,
            "pilots": {k: asdict(p) for k, p in pilots.items()},
        }
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(cache, json.dumps(store, indent=1).encode(), "the calibration cache")
        except (OSError, OutputError) as e:  # a read-only home: the choice stands, the next run measures again
            warnings.warn(f"calibration not kept: {e}", stacklevel=2)
    predicted = {}
    for m, w in pairs:
        p = pilots[label(m, w)]
        predicted[label(m, w)] = p.nfe * (interpolate(curve, p.block) + p.bookkeeping)
    best = min(chosen, key=lambda mw: predicted[label(*mw)])
    return Choice(*best, predicted[label(*best)], predicted[label("ar", 1)], predicted, bool(todo))
