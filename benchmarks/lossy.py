"""Speed for a measured cost: step compression of the lossy presets on a real model, their
total-variation distance from exact AR sampling on the enumerable tiny model, and (``--fid N``)
FID of N images per setting against ``ar`` and against held-out data, in one run.

    python benchmarks/lossy.py --model default --prompts 4 --fid 16 --out benchmarks/lossy

PJD's context c is set as a fraction of the row width (c = C/4, C/2, C): 4, 8, 16 on the 16-wide
real grid, and round(ratio * 3) = 1, 2, 3 on the tiny model's 3-wide rows (2 rows x 3 ids).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from jacobigen import METHODS
from jacobigen.core.sampling import SamplingConfig
from jacobigen.models import load_bundle
from jacobigen.tools.bench_fid import FidReference
from jacobigen.tools.bench_report import fid_cell, fid_note, md_table
from jacobigen.tools.exactness import exact_distribution, layout, sample, tiny_model, tv_distance
from jacobigen.tools.plots import plot_fid_vs_speed
from jacobigen.tools.threads import environment, loadavg

SETTINGS = [
    ("sjd", {}),
    ("pjd", {"pjd_ratio": 0.25}),
    ("pjd", {"pjd_ratio": 0.5}),
    ("pjd", {"pjd_ratio": 1.0}),
    ("pjd+scd-mc", {"pjd_ratio": 0.5}),
    ("gsd", {}),
    ("lantern", {}),
    ("lantern+vp", {}),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], help="the model dtype (default: its own here)")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--samples", type=int, default=20_000)
    ap.add_argument("--fid", type=int, default=16, help="images per setting for FID (0: off)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/lossy"))
    args = ap.parse_args()

    pipe = load_bundle(args.model, dtype=args.dtype)
    meta = environment(pipe.model, args.model)  # the commit, threads and machine, as every bench records
    prompts = (pipe.example_prompts * args.prompts)[: args.prompts]
    ar = sum(pipe.generate(p, method="ar", seed=i)[0].stats.nfe for i, p in enumerate(prompts))

    ref = FidReference.build(pipe, args.fid) if args.fid else None
    fid = ref.summary(ref.score("ar", 1)) if ref else None
    tiny, tiny_layout, plain = tiny_model(), layout(True), SamplingConfig()
    exact = exact_distribution(tiny, tiny_layout, plain)

    rows = []
    for name, opts in SETTINGS:
        nfe = sum(
            pipe.generate(p, method=name, window=args.window, seed=i, **opts)[0].stats.nfe
            for i, p in enumerate(prompts)
        )
        parts = METHODS[name].build(4, **opts)
        tv = tv_distance(exact, sample(tiny, tiny_layout, plain, parts, args.samples))
        rows.append(
            {
                "method": name,
                "options": opts,
                "lossless": METHODS[name].lossless,
                "step_compression": ar / nfe,
                "tv_from_exact": tv,
            }
        )
        if ref:
            rows[-1]["fid_vs_ar"], rows[-1]["fid_vs_data"] = ref.score(name, args.window, **opts)
        print(
            f"{name:12s} {json.dumps(opts):22s} compression {ar / nfe:5.2f}x  TV {tv:.3f}"
            + (f"  FID vs ar {rows[-1]['fid_vs_ar']:.1f}" if ref else ""),
            flush=True,
        )

    noise = tv_distance(exact, sample(tiny, tiny_layout, plain, METHODS["sjd"].build(4), args.samples, seed0=10**6))
    args.out.mkdir(parents=True, exist_ok=True)
    result = {
        "model": pipe.name,
        "window": args.window,
        "prompts": prompts,
        "tv_noise_floor": noise,
        "fid": fid,
        "rows": rows,
        **meta,
        "loadavg_after": loadavg(),
    }
    (args.out / "lossy.json").write_text(json.dumps(result, indent=2))
    fid_cols = {"fid_vs_ar": "FID vs ar", "fid_vs_data": "FID vs data"} if fid else {}
    table = md_table(
        ["method", "options", "step compression", "TV from exact", *fid_cols.values()],
        [
            [
                r["method"],
                json.dumps(r["options"]),
                f"{r['step_compression']:.2f}x",
                f"{r['tv_from_exact']:.3f}",
                *(fid_cell(r[k]) for k in fid_cols),
            ]
            for r in rows
        ],
    )
    notes = f"\nTV noise floor (exact sampler, same sample size): {noise:.3f}\n" + (f"\n{fid_note(fid)}" if fid else "")
    (args.out / "lossy.md").write_text(table + notes)
    if fid:
        points = [
            (
                " ".join([r["method"], *(f"{k}={v}" for k, v in r["options"].items())]),
                r["step_compression"],
                r["fid_vs_ar"],
                r["lossless"],
            )
            for r in rows
        ]
        plot_fid_vs_speed(
            {"step compression vs ar": points},
            fid["ar_vs_ar"],
            f"FID vs ar over {fid['images']} images per setting",
            args.out / "fid_vs_speed.png",
        )
    print(table + notes)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
