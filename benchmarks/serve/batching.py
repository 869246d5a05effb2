#!/usr/bin/env python
"""Does the server batch forwards? ``--requests`` requests of one method, ``--concurrency`` at a time,
against one request at a time, on one `jacobigen serve --max-batch CONCURRENCY --no-calibrate`; then
the same images offline in this process, batched as the server batches them (``generate`` with
``batch_size=CONCURRENCY``). Reports images/s of each, the server's shared model calls against its
image forwards (from ``/metrics``), and the threads and load. Writes ``batching.json`` and
``batching.md`` beside this script."""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from client import generate, server

PROMPTS = ["red heart", "grinning face", "sun", "cat face", "pizza", "blue car", "green tree", "yellow star"]
HERE = Path(__file__).parent


def metric(url: str, name: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics") as f:
        text = f.read().decode()
    return float(next(line.split()[1] for line in text.splitlines() if line.startswith(name)))


def served(url: str, bodies: list[dict], concurrency: int) -> dict:
    calls, forwards = metric(url, "jacobigen_model_calls_total"), metric(url, "jacobigen_forwards_total")
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        answers = list(pool.map(lambda b: generate(url, b), bodies))
    wall = time.perf_counter() - t0
    return {
        "concurrency": concurrency,
        "errors": sum(code != 200 for code, _, _ in answers),
        "seconds": wall,
        "images_per_second": len(bodies) / wall,
        "model_calls": metric(url, "jacobigen_model_calls_total") - calls,
        "image_forwards": metric(url, "jacobigen_forwards_total") - forwards,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--alone", type=int, default=8, help="requests sent one at a time")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--method", default="ar")
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--out", type=Path, default=HERE / "batching")
    args = ap.parse_args()
    decoding = {"method": args.method} | ({} if args.method == "ar" else {"window": args.window})
    bodies = [{"prompt": PROMPTS[i % len(PROMPTS)], "seed": i, **decoding} for i in range(args.requests)]
    load_before = os.getloadavg()[0]
    with server("--max-batch", str(args.concurrency), "--no-calibrate") as url:
        generate(url, bodies[0])  # warm-up
        one = served(url, bodies[: args.alone], 1)
        many = served(url, bodies, args.concurrency)

    from jacobigen.serve.server import load

    bundle = load("default")
    prompts, seeds = [b["prompt"] for b in bodies], [b["seed"] for b in bodies]
    bundle.generate(prompts[:1], seed=seeds[:1], **decoding)  # warm-up
    t0 = time.perf_counter()
    bundle.generate(prompts, seed=seeds, batch_size=args.concurrency, **decoding)
    offline = len(bodies) / (time.perf_counter() - t0)
    import torch

    result = {
        "method": args.method,
        "window": decoding.get("window", 1),
        "threads": torch.get_num_threads(),
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg()[0],
        "one_at_a_time": one,
        "batched": many,
        "offline_batched_images_per_second": offline,
        "batched_over_one_at_a_time": many["images_per_second"] / one["images_per_second"],
        "batched_over_offline": many["images_per_second"] / offline,
    }
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    table = (
        f"{args.method}, {result['threads']} torch thread(s) in the server and offline, "
        f"1-min load {load_before:.2f} before, {result['loadavg_after']:.2f} after\n\n"
        "| served | images/s | model calls per image forward | errors |\n|---|---|---|---|\n"
        f"| one request at a time ({args.alone}) | {one['images_per_second']:.3f} | "
        f"{one['model_calls'] / one['image_forwards']:.2f} | {one['errors']} |\n"
        f"| {args.concurrency} at a time ({args.requests}) | {many['images_per_second']:.3f} | "
        f"{many['model_calls'] / many['image_forwards']:.2f} | {many['errors']} |\n"
        f"| offline `generate`, batch {args.concurrency} | {offline:.3f} | - | - |\n\n"
        f"Batched over one at a time: {result['batched_over_one_at_a_time']:.2f}x; "
        f"served over offline at the same batch: {result['batched_over_offline']:.2f}x.\n"
    )
    args.out.with_suffix(".md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
