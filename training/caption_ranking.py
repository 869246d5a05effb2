"""Does the model read the caption, or only fail to draw it? Rank captions by the image's likelihood.

For the training images of `--names` and of `--others` more training names picked at random (the
first four sets), the teacher-forced code NLL of each image under every one of those names as its
caption. An image "picks" its caption when its own name gives the lowest NLL; the gain is its own
name's NLL below the mean over all names; the lift is its own name's NLL below the NLL without a
caption (the log-likelihood ratio that classifier-free guidance amplifies). They are reported for
the whole image and per region: the rows before the drawing starts, its first `--rows` drawn rows
(where samples go wrong, `completion.py`) and the rest. An image can pick its own name among others
(other names make it less likely) while its own name lifts it little above no caption at all: then
the caption rules images out but does not single this one out, and guidance cannot find it either.

    python training/caption_ranking.py                                  (shipped weights, raw codes)
    python training/caption_ranking.py --weights checkpoints/RUN/export --tokens data
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from common import DATA, WEIGHTS, add_cpu_args, add_sources_arg, load_images, load_split
from tokenize_data import encode_all
from train_ar import Batches, drawing_rows, token_ce

from jacobigen.models import embedded as E
from jacobigen.models.transformer import load_transformer
from jacobigen.models.vq import VQModel

REGIONS = ("before", "first rows", "rest")


def region_nll(ce: torch.Tensor, boi: torch.Tensor, first: torch.Tensor, rows: int) -> torch.Tensor:
    """Per-token CE [B, T] (zero where ignored) summed over each image's code rows before its first
    drawn row, its `rows` drawn rows from there, and the rest: [B, 3]. `boi` [B]: the index of each
    sequence's BOI token (targets from there on are its image); `first` [B]: its first drawn row."""
    row = E.GRID + 1
    t = torch.arange(ce.shape[1])[None]
    start = boi[:, None] + first[:, None] * row
    stop = start + rows * row
    regions = [(t < start), (t >= start) & (t < stop), t >= stop]
    return torch.stack([(ce * m).sum(1) for m in regions], 1)


def ranking(nll: np.ndarray, own: np.ndarray) -> tuple[float, float]:
    """`nll` [N, C]: image n's NLL under caption c; `own` [N]: its own caption. The fraction of
    images whose own caption has the lowest NLL, and the mean nats by which it is below the mean."""
    mine = nll[np.arange(len(own)), own]
    return float((nll.argmin(1) == own).mean()), float((nll.mean(1) - mine).mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", type=Path, default=WEIGHTS, help="folder with ar.safetensors (default: shipped)")
    ap.add_argument("--names", nargs="+", default=["sun", "red apple", "red heart", "cat face", "grinning face"])
    ap.add_argument("--others", type=int, default=15, help="more training names (at most three words), seeded")
    ap.add_argument("--rows", type=int, default=4, help="drawn rows in the middle region")
    ap.add_argument(
        "--tokens",
        choices=["raw", "data"],
        default="raw",
        help="raw: encode the images with the shipped VQ (the codes the shipped model trained on); "
        "data: data/tokens.npy as tokenized (e.g. --canonical-background)",
    )
    add_cpu_args(ap)
    add_sources_arg(ap)
    ap.set_defaults(sources=["noto", "twemoji", "openmoji", "fluent"])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    captions = json.loads((DATA / "captions.json").read_text())
    train = load_split(args.sources)["train"]
    names = sorted({captions[i] for i in train} - set(args.names))
    rng = np.random.default_rng(0)
    pool = [n for n in names if len(n.split()) <= 3]
    pick = [*args.names, *rng.choice(pool, args.others, replace=False)]
    images = [i for i in train if captions[i] in pick]
    pixels = load_images()[images]
    if args.tokens == "raw":
        vq = VQModel.load(WEIGHTS / "vq.safetensors")
        grids = encode_all(vq, torch.from_numpy(pixels).permute(0, 3, 1, 2).contiguous())
    else:
        grids = np.load(DATA / "tokens.npy")[images]
    first = torch.from_numpy(drawing_rows(pixels))
    model = load_transformer(args.weights / "ar.safetensors").eval()
    batches = Batches(
        grids, grids, [captions[i] for i in images], [{}] * len(images), E.captions_for(args.weights),
        list(range(len(images))), 0.0, train=False,
    )  # fmt: skip
    nll = np.zeros((len(images), len(pick) + 1, len(REGIONS)))  # the last column: no caption
    with torch.no_grad():
        for c, caption in enumerate([*pick, None]):
            seqs = [batches.tokens_of(caption, g) for g in grids]
            x, y = Batches.pad(seqs)
            boi = torch.tensor([b for _, b in seqs])
            nll[:, c] = region_nll(token_ce(model(x), y), boi, first, args.rows).numpy()
    own = np.array([pick.index(captions[i]) for i in images])
    print(f"{len(images)} training images of {len(pick)} names, each scored under all {len(pick)} names and none")
    for j, region in enumerate((*REGIONS, "whole image")):
        m = nll.sum(-1) if j == len(REGIONS) else nll[..., j]
        top1, gain = ranking(m[:, :-1], own)
        lift = (m[:, -1] - m[np.arange(len(own)), own]).mean()
        print(
            f"{region:12s} own name lowest {100 * top1:5.1f}%   below the mean {gain:6.2f} nats   "
            f"lift over no caption {lift:6.2f} nats"
        )
    whole = nll.sum(-1)
    for name in args.names:
        mine = [k for k, i in enumerate(images) if captions[i] == name]
        best = [str(pick[c]) for c in whole[mine, :-1].argmin(1)]
        lift = [round(float(whole[k, -1] - whole[k, own[k]]), 1) for k in mine]
        print(f"{name!r}: lowest NLL under {best}; lift over no caption {lift} nats")


if __name__ == "__main__":
    main()
