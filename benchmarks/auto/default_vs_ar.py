#!/usr/bin/env python
"""`jacobigen generate` with no --method against `--method ar`, as a user runs them (issue 50).

    python benchmarks/auto/default_vs_ar.py --threads 1,2 --runs 5 --out benchmarks/auto

Per thread count, from an empty calibration cache: one first run of the default (it calibrates),
then ``--runs`` rounds of the default and `ar` interleaved, each a fresh `jacobigen generate`
process on the same prompt and seed. It reports the median seconds per image of each (the decode,
from --stats), their ratio, what the first run cost beyond a later one (whole process), and how
far each run's predicted speed against ar (what it printed) was from what that run measured: its
own seconds per image against ar's median. Where the default runs the model in another dtype than
float32 (bfloat16 on a CPU with native bf16), `--method ar --dtype float32` runs in each round too:
the float32 `ar`, the faster `ar` there.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jacobigen.tools.bench_report import md_table  # torch-free: docs/gen_results.py renders report() too


def generate(args: list[str], cache: Path, work: Path) -> tuple[float, dict]:
    """(seconds the whole process took, its --stats record)."""
    stats = work / "stats.json"
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "jacobigen.cli", "generate", *args, "--out", str(work / "x.png"), "--stats", str(stats),
         "--no-progress", "--force"],
        check=True, capture_output=True, text=True, env={**os.environ, "JACOBIGEN_CACHE": str(cache)},
    )  # fmt: skip
    return time.perf_counter() - start, json.loads(stats.read_text())


def measure(threads: int, runs: int, prompt: str, seed: int, float32_ar: bool) -> dict:
    common = [prompt, "--seed", str(seed), "--threads", str(threads)]
    with tempfile.TemporaryDirectory() as tmp:
        cache, work = Path(tmp) / "cache", Path(tmp)
        first_total, first = generate(common, cache, work)
        auto, ar, ar32 = [], [], []
        for _ in range(runs):
            auto.append(generate(common, cache, work))
            ar.append(generate([*common, "--method", "ar"], cache, work))
            if float32_ar:
                ar32.append(generate([*common, "--method", "ar", "--dtype", "float32"], cache, work))
    auto_s = statistics.median(s["wall_time"] for _, s in auto)
    ar_s = statistics.median(s["wall_time"] for _, s in ar)
    ar32_s = statistics.median(s["wall_time"] for _, s in ar32) if ar32 else None
    predicted = first["auto"]["predicted_speedup"]

    def off(stats: dict) -> float:  # the run's predicted speed against ar over what it measured
        return stats["auto"]["predicted_speedup"] / (ar_s / stats["wall_time"]) - 1

    return {
        "threads": threads,
        "first": {"method": first["method"], "window": first["window"], "predicted_speedup": predicted,
                  "reason": first["auto"]["reason"], "seconds_per_image": first["wall_time"],
                  "process_seconds": first_total},
        "chosen": sorted({f"{s['method']}@{s['window']}" for _, s in auto}),
        "default_seconds": [s["wall_time"] for _, s in auto],
        "ar_seconds": [s["wall_time"] for _, s in ar],
        "speed_vs_ar": ar_s / auto_s,
        "dtype": first["dtype"],
        "float32_ar_seconds": [s["wall_time"] for _, s in ar32],
        "speed_vs_float32_ar": None if ar32_s is None else ar32_s / auto_s,
        "first_run_extra_seconds": first_total - statistics.median(t for t, _ in auto),
        "prediction_error": off(first),
        "later_prediction_errors": [off(s) for _, s in auto],
    }  # fmt: skip


def report(rows: list[dict]) -> str:
    """The markdown table of :func:`measure`'s rows."""
    return md_table(
        ["threads", "dtype", "first run chose", "its predicted speed vs ar", "its prediction off by",
         "later runs' predictions off by", "default vs ar (medians)", "default vs float32 ar",
         "first run beyond a later one"],
        [[str(r["threads"]), r.get("dtype", "float32"), f"{r['first']['method']} @ {r['first']['window']}",
          f"{r['first']['predicted_speedup']:.2f}x", f"{r['prediction_error']:+.0%}",
          ", ".join(f"{e:+.0%}" for e in r["later_prediction_errors"]), f"{r['speed_vs_ar']:.2f}x",
          "-" if r.get("speed_vs_float32_ar") is None else f"{r['speed_vs_float32_ar']:.2f}x",
          f"{r['first_run_extra_seconds']:.1f} s"] for r in rows],
    )  # fmt: skip


def main() -> int:
    from jacobigen.models import load_bundle
    from jacobigen.tools.threads import environment, loadavg

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--prompt", default="red heart")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/auto"))
    args = ap.parse_args()
    meta = environment(load_bundle("default").model, "default")  # the commit, machine and load
    float32_ar = meta["dtype"] != "float32"
    rows = [measure(int(t), args.runs, args.prompt, args.seed, float32_ar) for t in args.threads.split(",")]
    result = {**meta, "prompt": args.prompt, "seed": args.seed, "runs": args.runs, "rows": rows,
              "loadavg_after": loadavg()}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "default_vs_ar.json").write_text(json.dumps(result, indent=2))
    table = report(rows)
    (args.out / "default_vs_ar.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
