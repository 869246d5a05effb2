"""Code CE of the shipped AR model with and without captions, held-out and train (model card).

The difference is how much the caption tells the model about the image, in nats per code: near
zero means prompts barely steer generation, whatever the unconditional loss. Held-out names are
never seen in training, so their gain measures reading unseen captions; the gain on (a same-size
sample of) training images measures how well the captions users type from the list steer.

    python training/caption_gain.py
    python training/caption_gain.py --weights checkpoints/ar_words_scratch/export   (a run's export)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from common import DATA, WEIGHTS, add_cpu_args, add_sources_arg, load_split
from train_ar import Batches, mean_code_ce

from jacobigen.models import embedded as E
from jacobigen.models.transformer import load_transformer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", type=Path, default=WEIGHTS, help="folder with ar.safetensors (default: shipped)")
    add_cpu_args(ap)
    add_sources_arg(ap)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = load_transformer(args.weights / "ar.safetensors")
    captions = json.loads((DATA / "captions.json").read_text())
    keywords = json.loads((DATA / "keywords.json").read_text())
    reader = E.captions_for(args.weights)
    tokens = np.load(DATA / "tokens.npy")
    split = load_split(args.sources)
    rng = np.random.default_rng(0)
    subsets = {
        "held-out": split["test"],
        "train sample": sorted(rng.choice(split["train"], len(split["test"]), replace=False)),
    }
    for subset, indices in subsets.items():
        losses = []
        for drop in (0.0, 1.0):
            data = Batches(
                tokens, tokens, captions, keywords, reader, indices, drop_caption=drop, train=False
            )  # names as captions, no flips
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                losses.append(mean_code_ce(model, data))
        print(
            f"{subset} code CE: captioned {losses[0]:.4f}, unconditional {losses[1]:.4f}, "
            f"caption gain {losses[1] - losses[0]:.4f} nats/code"
        )


if __name__ == "__main__":
    main()
