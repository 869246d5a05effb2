#!/usr/bin/env python
"""The window policy under load, on loopback: ``auto`` (the policy picks per load) against fixed
``ar`` and fixed best lossless (``scd-mc``, window 32) over bounded request streams.

Loads: ``light`` and ``medium`` are open-loop Poisson arrivals (seeded) below and near the server's
capacity; ``saturating`` sends every request at once. Each policy sees the same arrivals, prompts and
seeds, on one `jacobigen serve --max-batch 8`. Reports p50/p99 latency (submit to response) and
images/s (images over first arrival to last response); writes ``bench.json``, ``bench.md`` and
``bench.png`` beside this script (``bench-uncalibrated.*`` with ``--no-calibrate``: the policy's rungs
as written instead of those that pay on this machine). About 7 minutes on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import threading
import time
from pathlib import Path

from client import generate, server

PROMPTS = ["red heart", "grinning face", "sun", "cat face", "pizza", "blue car", "green tree", "yellow star"]
LOADS = {"light": (6, 0.1), "medium": (10, 0.3), "saturating": (16, None)}  # requests, arrivals/s (None: all at once)
POLICIES = {"auto": {}, "ar": {"method": "ar"}, "scd-mc/32": {"method": "scd-mc", "window": 32}}
HERE = Path(__file__).parent


def stream(url: str, requests: int, rate: float | None, decoding: dict, seed: int) -> dict:
    rng = random.Random(seed)
    at, t = [], 0.0
    for _ in range(requests):
        at.append(t)
        t += rng.expovariate(rate) if rate else 0.0
    bodies = [{"prompt": rng.choice(PROMPTS), "seed": rng.randrange(1000), **decoding} for _ in range(requests)]
    results: list = [None] * requests
    t0 = time.perf_counter()

    def send(i: int) -> None:
        time.sleep(max(0.0, t0 + at[i] - time.perf_counter()))
        results[i] = generate(url, bodies[i])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(requests)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    ok = [r for r in results if r[0] == 200]
    latencies = sorted(s for _, _, s in results)
    picked: dict = {}
    for _, response, _ in ok:
        for img in response["data"]:
            key = f"{img['method']}/{img['window']}"
            picked[key] = picked.get(key, 0) + 1
    return {
        "requests": requests,
        "errors": requests - len(ok),
        "p50": statistics.median(latencies),
        "p99": latencies[round(0.99 * (len(latencies) - 1))],
        "images_per_second": len(ok) / wall,
        "decoded_as": picked,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-calibrate", action="store_true", help="the policy's rungs as written (bench-uncalibrated.*)")
    args = ap.parse_args()
    results: dict = {}
    calibrate = "--no-calibrate" if args.no_calibrate else "--calibrate"
    name = "bench-uncalibrated" if args.no_calibrate else "bench"
    with server("--max-batch", "8", "--max-queue", "64", calibrate) as url:
        generate(url, {"prompt": "sun", "method": "ar"})  # warm
        for load, (requests, rate) in LOADS.items():
            for policy, decoding in POLICIES.items():
                results.setdefault(load, {})[policy] = r = stream(url, requests, rate, decoding, args.seed)
                print(load, policy, {k: v for k, v in r.items()}, flush=True)
    (HERE / f"{name}.json").write_text(json.dumps(results, indent=1) + "\n")
    (HERE / f"{name}.md").write_text(table(results))
    plot(results, HERE / f"{name}.png")


def table(results: dict) -> str:
    lines = [
        "| load | policy | p50 latency (s) | p99 latency (s) | images/s | decoded as | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for load, by_policy in results.items():
        for policy, r in by_policy.items():
            picked = ", ".join(f"{k} x{v}" for k, v in r["decoded_as"].items())
            lines.append(
                f"| {load} | {policy} | {r['p50']:.2f} | {r['p99']:.2f} | {r['images_per_second']:.3f} | {picked} "
                f"| {r['errors']} |"
            )
    return "\n".join(lines) + "\n"


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    loads, policies = list(results), list(POLICIES)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, (key, label) in zip(
        axes, [("p50", "p50 latency (s)"), ("p99", "p99 latency (s)"), ("images_per_second", "images/s")], strict=True
    ):
        for j, policy in enumerate(policies):
            xs = [i + (j - 1) * 0.27 for i in range(len(loads))]
            ax.bar(xs, [results[load][policy][key] for load in loads], width=0.27, label=policy)
        ax.set_xticks(range(len(loads)), loads)
        ax.set_ylabel(label)
    axes[0].legend()
    fig.suptitle("jacobigen serve on the embedded model, 2 CPU cores, --max-batch 8 (loopback)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
