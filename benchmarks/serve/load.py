#!/usr/bin/env python
"""A bounded load test on loopback: ``--requests`` requests, ``--concurrency`` at a time, against one
`jacobigen serve`; every answer must be 200 and every image equal to offline `jacobigen generate` with
its prompt, seed, method and window. Requests repeat (prompt, seed) pairs across methods and over
time, so one image is checked in many batch compositions (and the offline check stays short).
Writes ``load.json`` beside this script."""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from client import Offline, generate, server

PROMPTS = ["red heart", "grinning face", "sun", "cat face", "pizza", "blue car", "green tree", "yellow star"]
DECODINGS = [{"method": "scd-mc", "window": 16}, {"method": "ar"}, {}]  # {}: the load policy picks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("load.json"))
    args = ap.parse_args()
    rng = random.Random(args.seed)
    bodies = [
        {"prompt": rng.choice(PROMPTS), "seed": rng.randrange(4), **rng.choice(DECODINGS)} for _ in range(args.requests)
    ]
    t0 = time.perf_counter()
    limits = ("--max-batch", str(args.concurrency), "--max-queue", str(4 * args.concurrency))
    with server(
        *limits, "--no-calibrate", "--deterministic"
    ) as url:  # the rungs as written: auto requests span several groups
        with ThreadPoolExecutor(args.concurrency) as pool:
            answers = list(pool.map(lambda b: generate(url, b), bodies))
    wall = time.perf_counter() - t0
    offline = Offline()
    errors = [(b, code, r) for b, (code, r, _) in zip(bodies, answers, strict=True) if code != 200]
    served = [(b, r) for b, (code, r, _) in zip(bodies, answers, strict=True) if code == 200]
    unequal = [
        (b["prompt"], img["seed"], img["method"], img["window"])
        for b, r in served
        for img in r["data"]
        if not offline.equal(b["prompt"], img)
    ]
    latencies = sorted(s for _, _, s in answers)
    result = {
        "requests": args.requests,
        "concurrency": args.concurrency,
        "errors": len(errors),
        "images_checked": sum(len(r["data"]) for _, r in served),
        "distinct_images": len(offline.cache),
        "unequal_to_offline": unequal,
        "wall_seconds": wall,
        "images_per_second": sum(len(r["data"]) for _, r in served) / wall,
        "latency_p50": statistics.median(latencies),
        "latency_p99": latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))],
        "methods": {f"{m}/{w}": n for (m, w), n in _count(served).items()},
        "first_error": errors[0][1:] if errors else None,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "unequal_to_offline"}, indent=1))
    print(f"{len(unequal)} image(s) unequal to offline generation")
    if errors or unequal:
        raise SystemExit(1)


def _count(served) -> dict:
    counts: dict = {}
    for _, r in served:
        for img in r["data"]:
            counts[img["method"], img["window"]] = counts.get((img["method"], img["window"]), 0) + 1
    return counts


if __name__ == "__main__":
    main()
