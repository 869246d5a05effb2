"""Speed for a measured cost: step compression of the lossy presets on a real model, and their
total-variation distance from exact AR sampling on the enumerable tiny model, in one run.

    python benchmarks/lossy.py --model default --prompts 4 --out benchmarks/lossy

PJD's context c is set as a fraction of the row width (c = C/4, C/2, C): 4, 8, 16 on the 16-wide
real grid, and round(ratio * 3) = 1, 2, 3 on the tiny model's 3-wide rows (2 rows x 3 ids).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from jacobigen import METHODS
from jacobigen.exactness import exact_distribution, layout, sample, tiny_model, tv_distance
from jacobigen.models import load_pipeline
from jacobigen.sampling import SamplingConfig

SETTINGS = [("sjd", {}), ("pjd", {"pjd_ratio": 0.25}), ("pjd", {"pjd_ratio": 0.5}),
            ("pjd", {"pjd_ratio": 1.0}), ("pjd+scd-mc", {"pjd_ratio": 0.5}),
            ("gsd", {}), ("lantern", {}), ("lantern+vp", {})]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--samples", type=int, default=20_000)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/lossy"))
    args = ap.parse_args()

    pipe = load_pipeline(args.model)
    prompts = (pipe.example_prompts * args.prompts)[:args.prompts]
    ar = sum(pipe.generate(p, method="ar", seed=i)[0].stats.nfe for i, p in enumerate(prompts))

    tiny, tiny_layout, plain = tiny_model(), layout(True), SamplingConfig()
    exact = exact_distribution(tiny, tiny_layout, plain)

    rows = []
    for name, opts in SETTINGS:
        nfe = sum(pipe.generate(p, method=name, window=args.window, seed=i, **opts)[0].stats.nfe
                  for i, p in enumerate(prompts))
        parts = METHODS[name].build(4, **opts)
        tv = tv_distance(exact, sample(tiny, tiny_layout, plain, parts, args.samples))
        rows.append({"method": name, "options": opts, "lossless": METHODS[name].lossless,
                     "step_compression": ar / nfe, "tv_from_exact": tv})
        print(f"{name:12s} {json.dumps(opts):22s} compression {ar / nfe:5.2f}x  TV {tv:.3f}", flush=True)

    noise = tv_distance(exact, sample(tiny, tiny_layout, plain, METHODS["sjd"].build(4), args.samples, seed0=10**6))
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"model": pipe.name, "window": args.window, "prompts": prompts, "tv_noise_floor": noise,
              "rows": rows}
    (args.out / "lossy.json").write_text(json.dumps(result, indent=2))
    table = "| method | options | step compression | TV from exact |\n|---|---|---|---|\n" + "".join(
        f"| {r['method']} | {json.dumps(r['options'])} | {r['step_compression']:.2f}x | {r['tv_from_exact']:.3f} |\n"
        for r in rows)
    (args.out / "lossy.md").write_text(table + f"\nTV noise floor (exact sampler, same sample size): {noise:.3f}\n")
    print(table)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
