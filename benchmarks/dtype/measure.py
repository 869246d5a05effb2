"""The embedded models in float32 and bfloat16 on this CPU, in one process, interleaved so that the
ratios hold on a shared machine:

- the cost of one forward over a block of 1, 4, 16, 32 and 64 tokens with the CFG pair in the
  decode's own cache (:func:`jacobigen.core.cache.cache_slots`, as ``--method auto`` times blocks),
  against a single token's, per dtype;
- ``scd-gs``, ``scd-mc`` and ``sjd-pac`` at window 16 against the plain KV-cache loop in the same
  dtype (:func:`jacobigen.tools.bench.decode_one`), each image of each dtype and method in turn.

The default dtype of the embedded models is chosen from this (docs/results.md, "Block cost by dtype").

    python benchmarks/dtype/measure.py --images 6 --rounds 9 --threads 1 --out benchmarks/dtype/measure.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

import torch

from jacobigen.core.cache import cache_slots
from jacobigen.decode.auto import context_for
from jacobigen.decode.costs import forward_cost_curve
from jacobigen.models.load import load_bundle
from jacobigen.tools.auto import model_rows
from jacobigen.tools.bench import PLAIN, decode_one
from jacobigen.tools.threads import environment, loadavg

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
BLOCKS = [1, 4, 16, 32, 64]
METHODS = [PLAIN, "scd-gs", "scd-mc", "sjd-pac"]


def bundles(spec: str, frames: int | None) -> dict[str, object]:
    """The model of ``spec`` once per dtype (the float32 load cast, as ``load_bundle(dtype=)`` casts)."""
    base = load_bundle(spec, "cpu")
    if frames is not None:
        base = base.with_frames(frames)
    return {name: replace(base, model=load_bundle(spec, "cpu").model.to(dtype)) for name, dtype in DTYPES.items()}


def block_costs(pipes: dict, rounds: int) -> dict[str, dict[int, float]]:
    """Median seconds of a forward per block size and dtype, the dtypes alternating round by round."""
    times: dict[str, dict[int, list[float]]] = {name: {b: [] for b in BLOCKS} for name in pipes}
    for r in range(rounds):
        for name in list(pipes)[:: 1 if r % 2 else -1]:
            pipe = pipes[name]
            _, rows = model_rows(pipe, {"cfg": 2.0})  # the CFG pair
            slots = partial(cache_slots, len(rows[0]) + len(pipe.layout.header), pipe.layout.length)
            curve = forward_cost_curve(pipe.model, BLOCKS, context_for(pipe.model, pipe.layout, rows), 1, 2, slots)
            for b, s in curve.items():
                times[name][b].append(s)
    return {name: {b: statistics.median(t) for b, t in per.items()} for name, per in times.items()}


def decodes(pipes: dict, images: int, window: int) -> dict[str, dict[str, dict]]:
    """Seconds and forwards per image of each method in each dtype, image by image in turn."""
    runs: dict[str, dict[str, list]] = {name: {m: [] for m in METHODS} for name in pipes}
    for i in range(images):
        prompt = next(iter(pipes.values())).example_prompts[i % 4]
        for name in list(pipes)[:: 1 if i % 2 else -1]:
            for method in METHODS:
                run = decode_one(pipes[name], method, window, prompt, seed=i)
                runs[name][method].append((run.wall, run.nfe))
    out: dict[str, dict[str, dict]] = {}
    for name, per in runs.items():
        plain = sum(w for w, _ in per[PLAIN])
        out[name] = {
            m: {
                "seconds_per_image": sum(w for w, _ in r) / len(r),
                "forwards_per_image": sum(n for _, n in r) / len(r),
                "speedup_vs_plain": plain / sum(w for w, _ in r),
            }
            for m, r in per.items()
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="emoji,emoji-video")
    ap.add_argument("--images", type=int, default=4, help="images (clips) per dtype and method")
    ap.add_argument("--frames", type=int, default=2, help="frames of a clip (the video model)")
    ap.add_argument("--rounds", type=int, default=7, help="rounds of block timings")
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    record: dict = {"capability": torch.backends.cpu.get_cpu_capability(), "models": {}}
    t0 = time.time()
    for spec in args.models.split(","):
        pipes = bundles(spec, args.frames if spec == "emoji-video" else None)
        record.setdefault("environment", environment(next(iter(pipes.values())).model))
        costs = block_costs(pipes, args.rounds)
        runs = decodes(pipes, args.images, args.window)
        record["models"][spec] = {
            "tokens_per_image": next(iter(pipes.values())).layout.length,
            "block_seconds": costs,
            "block_vs_single": {n: {b: c[b] / c[1] for b in BLOCKS} for n, c in costs.items()},
            "decodes": runs,
        }
        print(json.dumps({spec: record["models"][spec]}, indent=1), flush=True)
    record["environment"].pop("quantize", None)
    record.update(
        loadavg_after=loadavg(),
        seconds=time.time() - t0,
        images=args.images,
        window=args.window,
        rounds=args.rounds,
        frames=args.frames,
        date=time.strftime("%Y-%m-%d"),
        load_note="other helpers' test runs shared the 2 cores (loadavg_before/after)",
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
