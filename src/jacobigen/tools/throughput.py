"""Throughput against batch size: images and tokens per second when many images decode together.

Batching and Jacobi decoding both buy speed by giving the device more tokens per forward; on a
device that is already busy at batch 16, drafts cost real compute. This measures where the two
meet, per method, in one process, with the same prompts and seeds everywhere, beside the batched
plain loop a user would write (``plain-ar``: :func:`~jacobigen.tools.plain_ar.plain_ar_batch`).
Each method runs in each of ``modes``: the shared forward (the default), ``deterministic`` (the
shared forward on row-invariant kernels) and ``per-sequence`` (each sequence its own forwards).
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
from .bench_report import throughput_table as markdown
from .bench_rows import DETERMINISTIC, PER_SEQUENCE, SHARED
from .plain_ar import plain_ar_batch
from .threads import environment, loadavg

MODES = {SHARED: False, DETERMINISTIC: True, PER_SEQUENCE: "per-sequence"}  # generate(deterministic=...)


def run_throughput(
    pipe: ModelBundle,
    methods: list[str],
    batch_sizes: list[int],
    n_images: int,
    window: int,
    repeats: int = 1,
    progress: bool = True,
    model_spec: str | None = None,
    modes: tuple[str, ...] = (SHARED, DETERMINISTIC),
    **sampling,
) -> tuple[list[dict], dict]:
    """Decode ``n_images`` images (example prompts, seeds 0..n-1) for every (method, mode, batch
    size) and with the batched plain loop, ``repeats`` times, interleaved; report the fastest run of each.
    Returns the rows and the machine, code and weights (:func:`~jacobigen.tools.threads.environment`,
    given the ``--model`` spec ``model_spec``) with the load average before and after."""
    info = environment(pipe.model, model_spec)
    prompts = (pipe.example_prompts * n_images)[:n_images]
    seeds = image_seeds(0, n_images)
    methods = [m for m in methods if m != PLAIN]
    plain = PlainLoop(pipe, prompts, plain_options(pipe, sampling))
    for m in methods:  # warm-up: one-time costs (kernels, neighbour tables)
        get_method(m)
        pipe.generate(prompts[0], method=m, window=window, seed=0, **sampling)
    plain(1, limit=1)
    best: dict = {}
    runs = [(m, mode) for m in methods for mode in modes] + [(PLAIN, SHARED)]
    jobs = [(m, mode, b) for _ in range(repeats) for b in batch_sizes for m, mode in runs]
    for m, mode, b in tqdm(jobs, disable=not progress, desc="throughput", unit="run"):
        if m == PLAIN:
            row = plain(b)
        else:
            gen, _ = pipe.generate(
                prompts, method=m, window=window, seed=seeds, batch_size=b, deterministic=MODES[mode], **sampling
            )
            s = gen.stats
            row = {
                "window": 1 if m == "ar" else window,
                "lossless": gen.method.lossless,
                "wall_time": s.wall_time,
                "forward_passes": s.nfe,
                "step_compression": s.step_compression(pipe.layout.length),
                "overhead_share": None if s.overhead_time is None else s.overhead_time / s.wall_time,
            }
        if (m, mode, b) not in best or row["wall_time"] < best[m, mode, b]["wall_time"]:
            best[m, mode, b] = {
                "method": m,
                "mode": mode,
                "batch_size": b,
                "images": n_images,
                "images_per_second": n_images / row["wall_time"],
                "tokens_per_second": n_images * pipe.layout.cells / row["wall_time"],
                **row,
            }
    info["loadavg_after"] = loadavg()
    return [best[m, mode, b] for m, mode in runs for b in batch_sizes], info


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


def write_report(rows: list[dict], info: dict, out_dir: Path, meta: dict) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "throughput.json").write_text(json.dumps({**meta, **info, "rows": rows}, indent=2))
    (out_dir / "throughput.md").write_text(markdown(rows, info))
    if plots := extras.plots_or_warn():
        plots.plot_throughput(rows, out_dir / "throughput.png")
