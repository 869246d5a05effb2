"""Throughput against batch size: images and tokens per second when many images decode together.

Batching and Jacobi decoding both buy speed by giving the device more tokens per forward; on a
device that is already busy at batch 16, drafts cost real compute. This measures where the two
meet, per method, in one process, with the same prompts and seeds everywhere.
"""

from __future__ import annotations

import json
from pathlib import Path

from tqdm.auto import tqdm

from ..core.checks import image_seeds
from ..decode.methods import get_method
from ..models.bundle import ModelBundle
from . import extras
from .bench import pct
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
    """Decode ``n_images`` images (example prompts, seeds 0..n-1) for every (method, batch size),
    ``repeats`` times, interleaved; report the fastest run of each. Returns the rows and the
    machine, code and weights (:func:`~jacobigen.tools.threads.environment`, given the ``--model`` spec
    ``model_spec``) with the load average before and after."""
    info = environment(pipe.model, model_spec)
    prompts = (pipe.example_prompts * n_images)[:n_images]
    seeds = image_seeds(0, n_images)
    image_tokens = pipe.layout.cells
    for m in methods:  # warm-up: one-time costs (kernels, neighbour tables)
        get_method(m)
        pipe.generate(prompts[0], method=m, window=window, seed=0, **sampling)
    best: dict = {}
    jobs = [(m, b) for _ in range(repeats) for b in batch_sizes for m in methods]
    for m, b in tqdm(jobs, disable=not progress, desc="throughput", unit="run"):
        gen, _ = pipe.generate(prompts, method=m, window=window, seed=seeds, batch_size=b, **sampling)
        s = gen.stats
        if (m, b) not in best or s.wall_time < best[m, b]["wall_time"]:
            best[m, b] = {
                "method": m,
                "batch_size": b,
                "window": 1 if m == "ar" else window,
                "lossless": gen.method.lossless,
                "images": n_images,
                "wall_time": s.wall_time,
                "images_per_second": n_images / s.wall_time,
                "tokens_per_second": n_images * image_tokens / s.wall_time,
                "forward_passes": s.nfe,
                "step_compression": s.step_compression(pipe.layout.length),
                "overhead_share": None if s.overhead_time is None else s.overhead_time / s.wall_time,
            }
    info["loadavg_after"] = loadavg()
    return [best[m, b] for m in methods for b in batch_sizes], info


def markdown(rows: list[dict], info: dict | None = None) -> str:
    head = (
        (environment_line(info) + "\n" if info else "")
        + "| method | batch | images/s | image tokens/s | forward passes | step compression | overhead |\n"
        "|---|---|---|---|---|---|---|\n"
    )
    return head + "".join(
        f"| {r['method']} | {r['batch_size']} | {r['images_per_second']:.2f} | {r['tokens_per_second']:.0f} | "
        f"{r['forward_passes']} | {r['step_compression']:.2f}x | {pct(r['overhead_share'])} |\n"
        for r in rows
    )


def write_report(rows: list[dict], info: dict, out_dir: Path, meta: dict) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "throughput.json").write_text(json.dumps({**meta, **info, "rows": rows}, indent=2))
    (out_dir / "throughput.md").write_text(markdown(rows, info))
    if plots := extras.plots_or_warn():
        plots.plot_throughput(rows, out_dir / "throughput.png")
