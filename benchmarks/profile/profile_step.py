"""Where a decode's time goes outside the model forward: cProfile over one image, one thread.

Run against any checkout (``PYTHONPATH=other/src python benchmarks/profile/profile_step.py``) to
compare engines; writes a markdown section per (method, window) to stdout: wall time, model
forward, overhead share, torch ops per iteration outside the forward, and the functions of
jacobigen that take the most time by themselves (excluding the model's modules).
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import pstats
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from jacobigen.decode.api import generate
from jacobigen.models import load_bundle
from jacobigen.models.bundle import encode_one

MODEL_FILES = ("models/transformer.py", "core/cache.py", "torch/nn/")


def count_ops(pipe, prompt, method, window, seed) -> float:
    """aten ops per iteration outside the model's modules."""
    counts, depth = collections.Counter(), [0]

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not depth[0]:
                counts[func] += 1
            return func(*args, **(kwargs or {}))

    def enter(*_):
        depth[0] += 1

    def leave(*_):
        depth[0] -= 1

    hooks = [pipe.model.register_forward_pre_hook(enter), pipe.model.register_forward_hook(leave)]
    _, enc, uncond = encode_one(pipe, prompt)
    with Count():
        g = generate(
            pipe.model, enc, layout=pipe.layout, uncond=uncond, method=method, window=window, seed=seed, **pipe.defaults
        )
    for h in hooks:
        h.remove()
    return sum(counts.values()) / max(g.stats.nfe - 1, 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", default="ar:1,sjd:16,scd-gs:16,sjd-pac:16")
    ap.add_argument("--prompt", default="grinning face")
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32", help="the model's dtype")
    args = ap.parse_args()
    torch.set_num_threads(1)
    pipe = load_bundle("default", device="cpu", dtype=getattr(torch, args.dtype))
    _, enc, uncond = encode_one(pipe, args.prompt)
    for spec in args.runs.split(","):
        method, window = spec.split(":")
        kw = dict(layout=pipe.layout, uncond=uncond, method=method, window=int(window), **pipe.defaults)
        generate(pipe.model, enc, seed=0, **kw)  # warm-up
        best = min((generate(pipe.model, enc, seed=1, **kw).stats for _ in range(3)), key=lambda s: s.wall_time)
        prof = cProfile.Profile()
        prof.enable()
        generate(pipe.model, enc, seed=1, **kw)
        prof.disable()
        stats = pstats.Stats(prof).stats
        own = [
            (v[2], f"{k[0].split('/src/')[-1]}:{k[2]}")
            for k, v in stats.items()
            if "jacobigen" in k[0] and not k[0].endswith(MODEL_FILES)
        ]
        print(f"### {method}, window {window}\n")
        print(
            f"wall {best.wall_time:.3f} s, model forward {best.forward_time:.3f} s, overhead share "
            f"{1 - best.forward_time / best.wall_time:.1%}, {best.nfe} forwards, "
            f"{count_ops(pipe, args.prompt, method, int(window), 1):.0f} torch ops per iteration outside the model, "
            f"bookkeeping {(best.wall_time - best.forward_time) / best.nfe * 1e3:.3f} ms per iteration "
            f"({time.strftime('%H:%M')}, load {open('/proc/loadavg').read().split()[0]}, {args.dtype})\n"
        )
        print("| own time (s, under cProfile) | function |\n|---|---|")
        for t, name in sorted(own, reverse=True)[: args.top]:
            print(f"| {t:.3f} | `{name}` |")
        print()


if __name__ == "__main__":
    main()
