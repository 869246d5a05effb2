"""Throughput against batch size: images and tokens per second when many images decode together.

Batching and Jacobi decoding both buy speed by giving the device more tokens per forward; on a
device that is already busy at batch 16, drafts cost real compute. This measures where the two
meet, per method, in one process, with the same prompts and seeds everywhere, beside the batched
plain loop a user would write (``plain-ar``: :func:`~jacobigen.tools.plain_ar.plain_ar_batch`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tqdm.auto import tqdm

from ..core.checks import image_seeds
from ..core.contract import model_device, sync
from ..decode.methods import get_method
from ..models.bundle import ModelBundle
from . import extras
from .bench import PLAIN, plain_options
from .bench_report import pct
from .plain_ar import plain_ar_batch
from .threads import environment, environment_line, loadavg


def run_throughput(
    pipe: ModelBundle,
    methods: list[str],
    batch_sizes: list[int],
    n_images: int,
    window: int,
    repeats: int = 1,
    progress: bool = True,
    model_spec: str | None = None,
    **sampling,
) -> tuple[list[dict], dict]:
    """Decode ``n_images`` images (example prompts, seeds 0..n-1) for every (method, batch size)
    and with the batched plain loop, ``repeats`` times, interleaved; report the fastest run of each.
    Returns the rows and the machine, code and weights (:func:`~jacobigen.tools.threads.environment`,
    given the ``--model`` spec ``model_spec``) with the load average before and after."""
    info = environment(pipe.model, model_spec)
    prompts = (pipe.example_prompts * n_images)[:n_images]
    seeds = image_seeds(0, n_images)
    methods = [m for m in methods if m != PLAIN]
    names = [*methods, PLAIN]
    plain = PlainLoop(pipe, prompts, plain_options(pipe, sampling))
    for m in methods:  # warm-up: one-time costs (kernels, neighbour tables)
        get_method(m)
        pipe.generate(prompts[0], method=m, window=window, seed=0, **sampling)
    plain(1, limit=1)
    best: dict = {}
    jobs = [(m, b) for _ in range(repeats) for b in batch_sizes for m in names]
    for m, b in tqdm(jobs, disable=not progress, desc="throughput", unit="run"):
        if m == PLAIN:
            row = plain(b)
        else:
            gen, _ = pipe.generate(prompts, method=m, window=window, seed=seeds, batch_size=b, **sampling)
            s = gen.stats
            row = {
                "window": 1 if m == "ar" else window,
                "lossless": gen.method.lossless,
                "wall_time": s.wall_time,
                "forward_passes": s.nfe,
                "step_compression": s.step_compression(pipe.layout.length),
                "overhead_share": None if s.overhead_time is None else s.overhead_time / s.wall_time,
            }
        if (m, b) not in best or row["wall_time"] < best[m, b]["wall_time"]:
            best[m, b] = {
                "method": m,
                "batch_size": b,
                "images": n_images,
                "images_per_second": n_images / row["wall_time"],
                "tokens_per_second": n_images * pipe.layout.cells / row["wall_time"],
                **row,
            }
    info["loadavg_after"] = loadavg()
    return [best[m, b] for m in names for b in batch_sizes], info


class PlainLoop:
    """The batched plain loop over the run's prompts, timed like the engine's runs: prompts are
    encoded once, outside the clock; batch ``j`` of a run draws with seed ``j``."""

    def __init__(self, pipe: ModelBundle, prompts: list[str], sampling: dict):
        enc = pipe.encode(prompts)
        self.model, self.layout, self.sampling = enc.model, pipe.layout, sampling
        self.cond, self.uncond = enc.cond, enc.uncond

    def __call__(self, batch_size: int, limit: int | None = None) -> dict:
        n = len(self.cond) if limit is None else limit
        starts = range(0, n, batch_size)
        device = model_device(self.model)
        sync(device)
        t0 = time.perf_counter()
        for j, a in enumerate(starts):
            unconds = self.uncond[a : a + batch_size] if self.uncond else None
            plain_ar_batch(self.model, self.layout, self.cond[a : a + batch_size], unconds, seed=j, **self.sampling)
        sync(device)
        return {
            "window": 1,
            "lossless": True,
            "wall_time": time.perf_counter() - t0,
            "forward_passes": len(starts) * self.layout.length,
            "step_compression": 1.0,
            "overhead_share": None,
        }


def markdown(rows: list[dict], info: dict | None = None) -> str:
    """The rows as a table; "vs baseline" is images/s over the faster of ar and the plain loop at
    the same batch size."""
    base: dict = {}
    for r in rows:
        if r["method"] in ("ar", PLAIN):
            base[r["batch_size"]] = max(base.get(r["batch_size"], 0.0), r["images_per_second"])
    head = (
        (environment_line(info) + "\n" if info else "")
        + "| method | batch | images/s | vs baseline | image tokens/s | forward passes | step compression "
        "| overhead |\n|---|---|---|---|---|---|---|---|\n"
    )
    return head + "".join(
        f"| {r['method']} | {r['batch_size']} | {r['images_per_second']:.2f} | "
        f"{_ratio(r['images_per_second'], base.get(r['batch_size']))} | {r['tokens_per_second']:.0f} | "
        f"{r['forward_passes']} | {r['step_compression']:.2f}x | {pct(r['overhead_share'])} |\n"
        for r in rows
    )


def _ratio(x: float, base: float | None) -> str:
    return f"{x / base:.2f}x" if base else "-"


def write_report(rows: list[dict], info: dict, out_dir: Path, meta: dict) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "throughput.json").write_text(json.dumps({**meta, **info, "rows": rows}, indent=2))
    (out_dir / "throughput.md").write_text(markdown(rows, info))
    if plots := extras.plots_or_warn():
        plots.plot_throughput(rows, out_dir / "throughput.png")
