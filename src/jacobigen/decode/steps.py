"""Step tables: forward passes per image of each (method, window) for one model and sampling.

How many forwards a lossless method takes (its step compression) depends on the model and the
sampling, not on the machine: the same seed draws the same tokens on any device. So it is measured
once, on real images, and shipped beside the weights (``jacobigen/weights/steps.json`` for the
embedded model) or written by ``jacobigen bench --steps FILE`` for any checkpoint; ``--method auto``
(:mod:`jacobigen.decode.auto`) reads it and measures on the machine only what a forward costs there.

A table names its model by a fingerprint of the weights (:func:`fingerprint`) and the image's token
count, so a table never applies to another checkpoint; within it, one entry per sampling
(:func:`sampling_key`). A table that does not parse, or parses into something else, is skipped with
a warning: it can only make auto fall back to ``ar``.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from ..core.checks import SAMPLING_KEYS
from ..core.errors import ConfigError
from ..core.reading import parse_json, positive, read_bounded, within
from .calibration import cache_file

FORMAT = "jacobigen-steps"
VERSION = 1
MAX_TABLE_BYTES = 1 << 20  # a table holds a few dozen numbers per sampling
WEIGHTS = Path(__file__).parents[1] / "weights"  # jacobigen/weights: package data, the shipped tables
SAMPLING_DEFAULTS = {"cfg": 1.0, "temperature": 1.0, "top_k": None, "top_p": 1.0}


def fingerprint(model) -> str:
    """The weights a table was measured on: parameter count, shape count, and a checksum of the first
    4096 values of the first tensor, each rounded to bfloat16, to 4 significant digits: the same for
    the float32 weights and their bfloat16 cast (a sum of the unrounded values differed in its 4th
    digit on ``emoji-names``, which hid its table from a bfloat16 decode)."""
    import torch

    params = list(model.parameters())
    first = params[0].detach().flatten()[:4096].to(torch.bfloat16).double().sum().item()
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


def _steps(entry: object, where: str, length: int) -> dict[str, float]:
    """An entry's ``{"method@window": forward passes per image}``, each figure within what an image of
    ``length`` tokens allows: at least one forward, at most one per token and the prefill; at most
    ``length`` tokens per iteration."""
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
        out[str(name)] = within(row["nfe"], 1, length + 1, f"{where}: {name}.nfe")
        within(row["tokens_per_iteration"], 1e-6, length, f"{where}: {name}.tokens_per_iteration")
        positive(row["images"], f"{where}: {name}.images")
    return out


def load_table(path: Path) -> dict:
    """A step table, checked field by field (a :class:`ConfigError` saying what is wrong)."""
    data = parse_json(read_bounded(path, MAX_TABLE_BYTES, "step table", follow=True))  # a linked table: read
    keys = {"format", "version", "model", "fingerprint", "layout_length", "entries"}
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError(f"{path} is not a {FORMAT} file")
    if data.get("version") != VERSION or set(data) != keys:
        raise ConfigError(f"{path}: version {data.get('version')!r} or its fields are not those of version {VERSION}")
    if not isinstance(data["entries"], list) or not isinstance(data["fingerprint"], str):
        raise ConfigError(f"{path}: entries must be a list and fingerprint a string")
    length = data["layout_length"]
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise ConfigError(f"{path}: layout_length must be a whole number >= 1, got {length!r:.40}")
    for e in data["entries"]:
        _steps(e, str(path), length)
        if not isinstance(e["sampling"], str):
            raise ConfigError(f"{path}: an entry's sampling must be a string")
    return data


def table_folders() -> list[Path]:
    """Where tables are looked for: the package's weights (shipped tables) and ``steps/`` in the
    calibration cache's folder (``jacobigen bench --steps`` tables of other checkpoints)."""
    return [WEIGHTS, WEIGHTS / "names", WEIGHTS / "video", WEIGHTS / "names-video", cache_file().parent / "steps"]


_seen: dict[tuple, dict | None] = {}  # (path, mtime, size) -> parsed table (None: not a table)


def _table(path: Path) -> dict | None:
    """The table at ``path``, parsed once per version of the file; anything else there (a folder named
    ``*.json``, a FIFO, a symlink loop, a broken table) is skipped with a warning that says what it is."""
    try:
        st = path.stat()
        key: tuple = (str(path), st.st_mtime_ns, st.st_size)
    except OSError:  # nothing there; or a symlink loop, or a link to nothing: load_table says which
        if not os.path.lexists(path):
            return None
        key = (str(path), None, None)
    if key not in _seen:
        try:
            _seen[key] = load_table(path)
        except ConfigError as e:
            warnings.warn(f"step table skipped: {e}", stacklevel=3)
            _seen[key] = None
    return _seen[key]


def tables():
    """(path, table) of every step table found (:func:`table_folders`), shipped ones first."""
    for folder in table_folders():
        names = ["steps.json"] if folder.name != "steps" else []
        files = [folder / n for n in names] + (sorted(folder.glob("*.json")) if not names else [])
        for path in files:
            table = _table(path)
            if table:
                yield path, table


def find_steps(model, layout_length: int, sampling: dict) -> tuple[dict[str, float], Path] | None:
    """``{"method@window": forward passes per image}`` and the table's path, for this model's weights,
    image length and sampling; None when no table has them."""
    fp, key = fingerprint(model), sampling_key(sampling)
    for path, table in tables():
        if table["fingerprint"] != fp or table["layout_length"] != layout_length:
            continue
        for entry in table["entries"]:
            if entry["sampling"] == key:
                return _steps(entry, str(path), layout_length), path
    return None


def every_figure() -> list[tuple[str, int, dict[str, float]]]:
    """(table, image length, {"method@window": forwards per image}) of every table entry found: the
    comparable layouts a prior draws on."""
    return [
        (f"{path.parent.name}/{path.name}", table["layout_length"], _steps(entry, str(path), table["layout_length"]))
        for path, table in tables()
        for entry in table["entries"]
    ]
