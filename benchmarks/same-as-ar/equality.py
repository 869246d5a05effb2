"""How often a lossless preset with the invariant verifier (``--same-as-ar``) commits another token
than ``ar`` for the same seed, on the embedded ``emoji`` model: in float32 and bfloat16, in
deterministic mode and outside it. Prompts x seeds decode in batches; every preset runs beside
``ar`` in the same process.

    python benchmarks/same-as-ar/equality.py --out benchmarks/same-as-ar/equality.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from jacobigen.models import load_bundle
from jacobigen.tools.threads import environment

PROMPTS = ["red heart", "grinning face", "cat face", "sun", "blue car", "green tree", "pizza", "rocket"]
RUNS = [("scd-gs", 16), ("scd-mc", 32), ("sjd-vp", 16), ("sjd-pac", 16), ("scd-gs+pac", 64)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=4, help="seeds 0..N-1 of every prompt")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    texts = [t for t in PROMPTS for _ in range(args.seeds)]
    seeds = [s for _ in PROMPTS for s in range(args.seeds)]
    rows: list[dict] = []
    env: dict = {}
    combos = [(d, det) for d in ("float32", "bfloat16") for det in (True, False)]
    with tqdm(total=len(combos) * (1 + len(RUNS)), desc="equality") as bar:
        for dtype, det in combos:
            bundle = load_bundle("emoji", "cpu", dtype=dtype)
            env = env or {**environment(bundle.model, "emoji"), "dtype": "per row"}

            def run(method, window, bundle=bundle, det=det):
                t0 = time.perf_counter()
                out = [
                    bundle.generate(
                        texts[i : i + args.batch],
                        method=method,
                        window=window,
                        seed=seeds[i : i + args.batch],
                        deterministic=det,
                        same_as_ar=True,
                    )[0]
                    for i in range(0, len(texts), args.batch)
                ]
                tokens = torch.cat([g.tokens for g in out])
                nfe = sum(sum(g.stats.sequence_nfe) for g in out)
                return tokens, nfe, time.perf_counter() - t0

            ar, ar_nfe, ar_time = run("ar", 1)
            bar.update()
            for method, window in RUNS:
                tokens, nfe, seconds = run(method, window)
                differ = tokens != ar
                first = [int(r.nonzero()[0]) if r.any() else None for r in differ]
                rows.append(
                    {
                        "dtype": dtype,
                        "deterministic": det,
                        "method": f"{method}+invariant",
                        "window": window,
                        "images": len(texts),
                        "tokens": ar.numel(),
                        "images_differing": int(differ.any(1).sum()),
                        "tokens_differing": int(differ.sum()),
                        # the first differing token decides the rest: count those per 10^5 tokens
                        "first_differences_per_1e5_tokens": 1e5 * sum(f is not None for f in first) / ar.numel(),
                        "step_compression": ar_nfe / nfe,
                        "seconds": seconds,
                        "ar_seconds": ar_time,
                    }
                )
                bar.update()
                print(json.dumps(rows[-1]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record = {**env, "model": "emoji", "prompts": PROMPTS, "seeds": args.seeds, "batch": args.batch}
    args.out.write_text(json.dumps({"env": record, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
