"""Where does a sample go wrong? Complete real images from their first rows.

For each image of the given emoji names, one row of tiles: the image through the VQ, then the model's
samples given the caption and the image's first R code rows (R = 0 is plain generation from the
caption). A model that completes an apple from its top rows but starts something else from the
caption alone knows the shape and fails at the start: that is what `train_ar.py --start-weight`
works on. Sampling goes through the package's `generate` on a layout of the remaining rows (the
prompt holds the caption, the image-start token and the given rows), so it is exactly the model's
distribution.

    python training/completion.py --out checkpoints/steering/completion_shipped.png
    python training/completion.py --weights checkpoints/RUN/export --out ...
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from common import DATA, WEIGHTS, add_cpu_args, add_sources_arg, load_split
from PIL import Image

from jacobigen import generate
from jacobigen.models import embedded as E
from jacobigen.models.bundle import encode_one
from jacobigen.models.load import embedded_bundle


def complete(pipe, caption: str, grid: np.ndarray, rows: int, seed: int, **sampling) -> torch.Tensor:
    """A [16, 16] grid: the first `rows` rows of `grid`, the rest sampled given them and the caption."""
    given = E.frame_tokens(grid[:rows])
    layout = replace(pipe.layout, rows=pipe.layout.rows - rows)
    model, cond, uncond = encode_one(pipe, caption)
    gen = generate(
        model,
        cond + given,
        layout=layout,
        uncond=uncond + given,
        method="scd-mc",
        window=8,  # named, so that a seed gives the same tokens whatever the default window learns
        seed=seed,
        **sampling,
    )
    return torch.cat([torch.as_tensor(grid[:rows]).long(), gen.grid[0]])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", type=Path, default=WEIGHTS, help="folder with ar.safetensors (default: shipped)")
    ap.add_argument("--names", nargs="+", default=["sun", "red apple"])
    ap.add_argument("--rows", type=int, nargs="+", default=[0, 0, 4, 7], help="given rows per tile (repeat for seeds)")
    ap.add_argument("--cfg", type=float, default=3.0)
    ap.add_argument("--temperature", type=float, default=0.5)
    ap.add_argument("--top-k", type=int, default=50)
    ap.add_argument("--out", type=Path, required=True)
    add_cpu_args(ap)
    add_sources_arg(ap)
    ap.set_defaults(sources=["noto", "twemoji", "openmoji", "fluent"])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    pipe = embedded_bundle(args.weights)
    captions = json.loads((DATA / "captions.json").read_text())
    tokens = np.load(DATA / "tokens.npy")
    split = load_split(args.sources)
    chosen = (i for i in split["train"] + split["test"] if captions[i] in args.names)
    images = sorted(chosen, key=lambda i: (args.names.index(captions[i]), i))
    sampling = {"cfg": args.cfg, "temperature": args.temperature, "top_k": args.top_k}
    grids = []
    for i in images:
        grids.append(torch.as_tensor(tokens[i]).long())
        for t, rows in enumerate(args.rows):
            grids.append(complete(pipe, captions[i], tokens[i], rows, seed=1000 * i + t, **sampling))
    tiles = pipe.decode(torch.stack(grids), None)
    width = 1 + len(args.rows)
    sheet = Image.new("RGB", (64 * width, 64 * len(images)), "white")
    for j, tile in enumerate(tiles):
        sheet.paste(tile.resize((64, 64)), (64 * (j % width), 64 * (j // width)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    sheet.resize((96 * width, 96 * len(images)), Image.NEAREST).save(args.out)
    print(f"{args.out}: rows {[captions[i] for i in images]}; columns: image, then given rows {args.rows}")


if __name__ == "__main__":
    main()
