"""The model's own samples for training names: the rejected half of self-play fine-tuning.

Self-play fine-tuning (SPIN; Chen et al. 2024, arXiv 2401.01335) pairs each real image with what
the model itself draws from the same caption and trains the model to tell them apart
(`train_ar.py --spin`). This script draws those samples: one per name for `--names` training
names picked by seed, with `ar` at cfg 3, temperature 1, top-p 0.8 within the model's top-k 200
(the pictures users get at temperature 1, less the tail that top-p cuts). Resumable: it writes
in chunks and a rerun continues where the file stops.

    python training/sample_pool.py --model checkpoints/ar_canon/export --out checkpoints/spin/pool.npz
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from common import DATA, add_sources_arg, load_split
from fetch_data import split_group

from jacobigen.models import embedded as E
from jacobigen.models.load import embedded_bundle


def pool_names(captions: list[str], train: list[int], n: int, seed: int) -> list[str]:
    """`n` distinct training names (skin tones removed), picked by `seed`, in a fixed order (a
    permutation, unlike eval_steering.pick_names: run 9's pool was drawn in this order)."""
    names = sorted({split_group(captions[i]) for i in train})
    return [names[i] for i in np.random.default_rng(seed).permutation(len(names))[:n]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, required=True, help="an export folder (ar.safetensors, words.json)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--names", type=int, default=1200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--cfg", type=float, default=3.0)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=0.8)
    ap.add_argument("--threads", type=int, default=1)
    add_sources_arg(ap)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    captions = json.loads((DATA / "captions.json").read_text())
    names = pool_names(captions, load_split(args.sources)["train"], args.names, args.seed)
    grids = np.zeros((0, E.GRID, E.GRID), np.int16)
    if args.out.exists():
        done = np.load(args.out)
        grids = done["grids"]
        if list(done["names"]) != names[: len(grids)]:
            raise SystemExit(f"{args.out} holds another pool (other names or seed): remove it or pick another --out")
    pipe = embedded_bundle(args.model)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    while len(grids) < len(names):
        t0 = time.time()
        todo = names[len(grids) : len(grids) + args.chunk]
        gen, _ = pipe.generate(
            todo, method="ar", seed=args.seed * 100_000 + len(grids), cfg=args.cfg,
            temperature=args.temperature, top_p=args.top_p,
        )  # fmt: skip
        grids = np.concatenate([grids, gen.grid.cpu().numpy().astype(np.int16)])
        tmp = args.out.with_suffix(".tmp.npz")
        np.savez(tmp, grids=grids, names=np.array(names[: len(grids)]))
        tmp.replace(args.out)
        print(f"{len(grids)}/{len(names)} samples ({time.time() - t0:.0f} s for {len(todo)})", flush=True)


if __name__ == "__main__":
    main()
