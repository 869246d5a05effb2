"""Step tables written by ``jacobigen bench --steps FILE``: forward passes per image of each (method,
window), measured on real images with a bundle's sampling (the tables are read by
:mod:`jacobigen.decode.steps`)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from ..core.errors import ConfigError
from ..decode.steps import FORMAT, VERSION, fingerprint, label, load_table, sampling_key
from .files import atomic_write


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


def existing_table(path: Path) -> dict | None:
    """The step table already at ``path`` (None: nothing there), checked before any work: anything
    else there (a user's notes, a broken table) is refused, never replaced."""
    if not path.exists():
        return None
    try:
        return load_table(path)
    except ConfigError as e:
        raise ConfigError(
            f"--steps {path} exists and is not a step table ({e}); bench --steps adds an entry to a step "
            "table, or writes a new file: name another file"
        ) from None


def check_model(table: dict | None, path: Path, bundle) -> None:
    """Refuse to add ``bundle``'s entry to a table of other weights (a table names one model)."""
    fp, length = fingerprint(bundle.model), bundle.layout.length
    if table is not None and (table["fingerprint"] != fp or table["layout_length"] != length):
        raise ConfigError(
            f"--steps {path} holds the step table of {table['model']!r} (weights {table['fingerprint']}, "
            f"{table['layout_length']} tokens per image), not of {bundle.name!r} (weights {fp}, {length} tokens): "
            "a table holds one model's entries; name another file (auto reads every *.json in its steps folder)"
        )


def write_table(path: Path, bundle, steps: dict, sampling: dict, how: dict) -> str:
    """Add (or replace) the entry of ``sampling`` in the step table at ``path`` for ``bundle``'s weights
    (anything else at ``path``, or another model's table, is refused); returns what it did, in words."""
    table = existing_table(path)
    check_model(table, path, bundle)
    key = sampling_key(sampling)
    table = table or {
        "format": FORMAT,
        "version": VERSION,
        "model": bundle.name,
        "fingerprint": fingerprint(bundle.model),
        "layout_length": bundle.layout.length,
        "entries": [],
    }
    replaced = any(e["sampling"] == key for e in table["entries"])
    made = {**how, "dtype": bundle.dtype, "torch": torch.__version__, "date": time.strftime("%Y-%m-%d")}
    entry = {"sampling": key, "made": made, "steps": steps}
    table["entries"] = [e for e in table["entries"] if e["sampling"] != key] + [entry]
    atomic_write(path, (json.dumps(table, indent=1) + "\n").encode(), "step table")
    n = len(table["entries"])
    return (
        f"{'replaced' if replaced else 'added'} the entry of {table['model']} for sampling {key} "
        f"({len(steps)} method@window rows; {n} entr{'y' if n == 1 else 'ies'} in the table)"
    )
