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
    made = {**how, "torch": torch.__version__, "date": time.strftime("%Y-%m-%d")}
    entry = {"sampling": key, "made": made, "steps": steps}
    table["entries"] = [e for e in table["entries"] if e["sampling"] != key] + [entry]
    atomic_write(path, (json.dumps(table, indent=1) + "\n").encode(), "step table")
