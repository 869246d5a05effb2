"""The embedded models in float32 and bfloat16 on this CPU, in one process, interleaved so that the
ratios hold on a shared machine:

- the cost of one forward over a block of 1, 4, 16, 32 and 64 tokens with the CFG pair in the
  decode's own cache (:func:`jacobigen.core.cache.cache_slots`, as ``--method auto`` times blocks),
  against a single token's, per dtype;
- ``scd-gs``, ``scd-mc`` and ``sjd-pac`` at window 16 against the plain KV-cache loop in the same
  dtype (:func:`jacobigen.tools.bench.decode_one`), each image of each dtype and method in turn.

The default dtype of the embedded models is chosen from this (docs/results.md, "Block cost by dtype"):
the one whose fastest preset runs fastest, on a quiet machine, at one and two threads.

    python benchmarks/dtype/measure.py --models emoji-names,emoji --images 8 --rounds 9 --threads 1 \
        --out benchmarks/dtype/threads-1.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from functools import partial
from pathlib import Path

import torch

from jacobigen.core.cache import cache_slots
from jacobigen.decode.auto import context_for
from jacobigen.decode.costs import forward_cost_curve
from jacobigen.models.load import load_bundle, weights_provenance
from jacobigen.tools.auto import model_rows
from jacobigen.tools.bench import PLAIN, decode_one, encode_one
from jacobigen.tools.threads import environment, loadavg

DTYPES = ("float32", "bfloat16")
BLOCKS = [1, 4, 16, 32, 64]
METHODS = [PLAIN, "scd-gs", "scd-mc", "sjd-pac"]


def bundles(spec: str, frames: int | None) -> dict[str, object]:
    """The model of ``spec`` once per dtype, as ``load_bundle(dtype=)`` loads it."""
    loaded = {name: load_bundle(spec, "cpu", dtype=name) for name in DTYPES}
    return {name: b if frames is None else b.with_frames(frames) for name, b in loaded.items()}


def frames_of(spec: str, args) -> int | None:
    """A clip model's frames (``--frames``); None for an image model."""
    return args.frames if spec == "emoji-video" else None


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


@torch.inference_mode()
def divergence(pipes: dict, images: int) -> dict[str, float]:
    """The price of the dtype: how far the bfloat16 model's next-token laws (at the sampling's
    temperature) stand from the float32 model's, teacher-forced on float32 ``ar`` images: mean KL
    (float32 || bfloat16) and total variation per token, and the share of positions whose most likely
    token agrees."""
    f32, b16 = pipes["float32"], pipes["bfloat16"]
    temperature = f32.defaults.get("temperature", 1.0)
    kl, tv, agree = [], [], []
    for i in range(images):
        prompt = f32.example_prompts[i % 4]
        image = torch.as_tensor(decode_one(f32, "ar", 1, prompt, seed=i).tokens).reshape(1, -1)
        _, prefix, _ = encode_one(f32, prompt)
        pre = torch.as_tensor([*prefix, *f32.layout.header]).reshape(1, -1)
        x, at = torch.cat([pre, image], 1), slice(pre.shape[1] - 1, pre.shape[1] - 1 + image.shape[1])
        a, b = (p.model(x)[0, at].float().div(temperature).log_softmax(-1) for p in (f32, b16))
        kl.append((a.exp() * (a - b)).sum(-1).mean().item())
        tv.append((a.exp() - b.exp()).abs().sum(-1).mean().item() / 2)
        agree.append((a.argmax(-1) == b.argmax(-1)).float().mean().item())
    return {"kl_nats_per_token": statistics.mean(kl), "tv_per_token": statistics.mean(tv),
            "argmax_agrees": statistics.mean(agree), "temperature": temperature}  # fmt: skip


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
        pipes = bundles(spec, frames_of(spec, args))
        record.setdefault("environment", environment(next(iter(pipes.values())).model))
        costs = block_costs(pipes, args.rounds)
        runs = decodes(pipes, args.images, args.window)
        record["models"][spec] = {
            "model": spec,
            "weights": weights_provenance(spec),
            "tokens_per_image": next(iter(pipes.values())).layout.length,
            "block_seconds": costs,
            "block_vs_single": {n: {b: c[b] / c[1] for b in BLOCKS} for n, c in costs.items()},
            "decodes": runs,
            "divergence": divergence(pipes, args.images) if frames_of(spec, args) is None else None,
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
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
