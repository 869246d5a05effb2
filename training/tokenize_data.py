"""Encode every dataset image (and its mirror image) with the trained VQ.

Writes data/tokens.npy and data/tokens_flip.npy, int16 [N, 16, 16]. Flips are
done in pixel space: a mirrored code grid is not the code grid of the mirror.

Run: python training/tokenize_data.py
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from common import DATA, WEIGHTS, load_images

from jacobigen.models.vq import VQModel


@torch.no_grad()
def encode_all(vq: VQModel, images: torch.Tensor, bs: int = 256) -> np.ndarray:
    return np.concatenate([vq.encode(images[i : i + bs]).numpy().astype(np.int16) for i in range(0, len(images), bs)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", default=str(WEIGHTS / "vq.safetensors"))
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    vq = VQModel.load(args.weights)
    images = torch.from_numpy(load_images()).permute(0, 3, 1, 2).contiguous()
    tokens = encode_all(vq, images)
    np.save(DATA / "tokens.npy", tokens)
    np.save(DATA / "tokens_flip.npy", encode_all(vq, images.flip(-1)))
    print(f"wrote {DATA / 'tokens.npy'} and tokens_flip.npy: {tokens.shape}, {len(np.unique(tokens))} distinct codes")


if __name__ == "__main__":
    main()
