"""Step tables: forward passes per image of each (method, window) for one model and sampling.

How many forwards a lossless method takes (its step compression) depends on the model and the
sampling, not on the machine: the same seed draws the same tokens on any device. So it is measured
once, on real images, and shipped beside the weights (``jacobigen/weights/steps.json`` for the
embedded model) or written by ``jacobigen bench --steps FILE`` for any checkpoint; ``--method auto``
(:mod:`jacobigen.tools.auto`) reads it and measures on the machine only what a forward costs there.

A table names its model by a fingerprint of the weights (:func:`fingerprint`) and the image's token
count, so a table never applies to another checkpoint; within it, one entry per sampling
(:func:`sampling_key`). A table that does not parse, or parses into something else, is skipped with
a warning: it can only make auto fall back to ``ar``.
"""

from __future__ import annotations

import json
import math
import os
import stat
import time
import warnings
from pathlib import Path

import torch

from ..core.checks import SAMPLING_KEYS
from ..core.errors import ConfigError
from .files import atomic_write

FORMAT = "jacobigen-steps"
VERSION = 1
MAX_TABLE_BYTES = 1 << 20  # a table holds a few dozen numbers per sampling
SAMPLING_DEFAULTS = {"cfg": 1.0, "temperature": 1.0, "top_k": None, "top_p": 1.0}


def fingerprint(model) -> str:
    """The weights a table was measured on: parameter count, shape count, and a checksum of the first
    4096 values of the first tensor to 4 significant digits (the same in float32 and bfloat16)."""
    params = list(model.parameters())
    first = params[0].detach().flatten()[:4096].double().sum().item()
    return f"{sum(p.numel() for p in params)}p/{len(params)}t/{first:.3e}"


def sampling_key(sampling: dict) -> str:
    """The sampling as a table and the cache name it: every key filled in, numbers to 4 significant
    digits (``temperature=0.9000001`` is ``0.9``), ``top_p`` 1 and ``top_k`` None meaning none."""
    full = {**SAMPLING_DEFAULTS, **{k: v for k, v in sampling.items() if v is not None}}
    unknown = set(full) - set(SAMPLING_KEYS)
    if unknown:
        raise ConfigError(f"unknown sampling option(s) {', '.join(sorted(unknown))}: use {', '.join(SAMPLING_KEYS)}")
    parts = []
    for k in SAMPLING_KEYS:
        v = full[k]
        parts.append(f"{k}={'none' if v is None else format(float(v), '.4g')}")
    return ",".join(parts)


def label(method: str, window: int) -> str:
    """A candidate's key in tables, the cache and ``Choice.predicted``."""
    return f"{method}@{window}"


def read_bounded(path: Path, limit: int, what: str) -> bytes:
    """At most ``limit`` bytes of a regular file (a :class:`ConfigError` for anything else: a FIFO
    is opened without blocking, a symlink is not followed, a longer file is refused unread)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise ConfigError(f"cannot read {what} {path}: {e.strerror or e}") from e
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"{what} {path} is not a regular file")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ConfigError(f"{what} {path} is larger than {limit} bytes")
    return data


def parse_json(data: bytes) -> object:
    """Strict JSON: NaN and infinities are refused, and so is nesting too deep to parse."""

    def constant(name):
        raise ValueError(f"{name} is not a number JSON allows")

    try:
        return json.loads(data, parse_constant=constant)
    except (ValueError, RecursionError, UnicodeDecodeError) as e:
        raise ConfigError(f"not JSON ({type(e).__name__}: {str(e)[:80]})") from None


def positive(value, what: str) -> float:
    """A finite number > 0 (bools are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{what} must be a finite number > 0, got {value!r:.40}")
    return float(value)


def _steps(entry: object, where: str) -> dict[str, float]:
    if (
        not isinstance(entry, dict)
        or set(entry) != {"sampling", "made", "steps"}
        or not isinstance(entry["steps"], dict)
        or not isinstance(entry["made"], dict)
    ):
        raise ConfigError(f"{where}: an entry holds exactly 'sampling', 'made' and 'steps'")
    out = {}
    for name, row in entry["steps"].items():
        if not isinstance(row, dict) or set(row) != {"nfe", "tokens_per_iteration", "images"}:
            raise ConfigError(f"{where}: {name!r} holds exactly nfe, tokens_per_iteration and images")
        for k in row:
            positive(row[k], f"{where}: {name}.{k}")
        out[str(name)] = float(row["nfe"])
    return out


def load_table(path: Path) -> dict:
    """A step table, checked field by field (a :class:`ConfigError` saying what is wrong)."""
    data = parse_json(read_bounded(path, MAX_TABLE_BYTES, "step table"))
    keys = {"format", "version", "model", "fingerprint", "layout_length", "entries"}
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError(f"{path} is not a {FORMAT} file")
    if data.get("version") != VERSION or set(data) != keys:
        raise ConfigError(f"{path}: version {data.get('version')!r} or its fields are not those of version {VERSION}")
    if not isinstance(data["entries"], list) or not isinstance(data["fingerprint"], str):
        raise ConfigError(f"{path}: entries must be a list and fingerprint a string")
    positive(data["layout_length"], f"{path}: layout_length")
    for e in data["entries"]:
        _steps(e, str(path))
        if not isinstance(e["sampling"], str):
            raise ConfigError(f"{path}: an entry's sampling must be a string")
    return data


def table_folders() -> list[Path]:
    """Where tables are looked for: the package's weights (shipped tables) and ``steps/`` in the
    calibration cache's folder (``jacobigen bench --steps`` tables of other checkpoints)."""
    from ..models.load import WEIGHTS
    from .calibration import cache_file

    return [WEIGHTS, WEIGHTS / "video", cache_file().parent / "steps"]


_seen: dict[tuple, dict | None] = {}  # (path, mtime, size) -> parsed table (None: not a table)


def _table(path: Path) -> dict | None:
    try:
        st = path.stat()
    except OSError:
        return None
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _seen:
        try:
            _seen[key] = load_table(path)
        except ConfigError as e:
            warnings.warn(f"step table skipped: {e}", stacklevel=3)
            _seen[key] = None
    return _seen[key]


def find_steps(model, layout_length: int, sampling: dict) -> tuple[dict[str, float], Path] | None:
    """``{"method@window": forward passes per image}`` and the table's path, for this model's weights,
    image length and sampling; None when no table has them."""
    fp, key = fingerprint(model), sampling_key(sampling)
    for folder in table_folders():
        names = ["steps.json"] if folder.name != "steps" else []
        files = [folder / n for n in names] + (sorted(folder.glob("*.json")) if not names else [])
        for path in files:
            table = _table(path)
            if not table or table["fingerprint"] != fp or table["layout_length"] != layout_length:
                continue
            for entry in table["entries"]:
                if entry["sampling"] == key:
                    return _steps(entry, str(path)), path
    return None


def measure_steps(bundle, pairs: list[tuple[str, int]], prompts: list[str], seeds: list[int], progress=False) -> dict:
    """Forward passes per image of each (method, window), over every (prompt, seed), decoded as a batch
    with the bundle's sampling: one table entry's ``steps``."""
    from tqdm.auto import tqdm

    texts = [p for p in prompts for _ in seeds]
    all_seeds = [s for _ in prompts for s in seeds]
    out = {}
    for method, window in tqdm(pairs, disable=not progress, desc="step table", unit="method"):
        gen, _ = bundle.generate(texts, method=method, window=window, seed=all_seeds)
        s = gen.stats
        nfe = sum(s.sequence_nfe) / len(s.sequence_nfe)
        out[label(method, window)] = {
            "nfe": nfe,
            "tokens_per_iteration": round(s.mean_accepted, 4),
            "images": len(texts),
        }
    return out


def write_table(path: Path, bundle, steps: dict, sampling: dict, how: dict) -> None:
    """Add (or replace) the entry of ``sampling`` in the table at ``path`` for ``bundle``'s weights."""
    fp, key = fingerprint(bundle.model), sampling_key(sampling)
    table = None
    if path.exists():
        try:
            table = load_table(path)
        except ConfigError:
            table = None
        if table and (table["fingerprint"] != fp or table["layout_length"] != bundle.layout.length):
            table = None  # another model's table: replaced
    table = table or {
        "format": FORMAT,
        "version": VERSION,
        "model": bundle.name,
        "fingerprint": fp,
        "layout_length": bundle.layout.length,
        "entries": [],
    }
    made = {**how, "dtype": bundle.dtype, "torch": torch.__version__, "date": time.strftime("%Y-%m-%d")}
    entry = {"sampling": key, "made": made, "steps": steps}
    table["entries"] = [e for e in table["entries"] if e["sampling"] != key] + [entry]
    atomic_write(path, (json.dumps(table, indent=1) + "\n").encode(), "step table")
