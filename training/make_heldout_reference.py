"""Write the held-out reference that ships with the package for FID against data.

Every held-out image (``data/split.json`` "test": emoji names never seen in training) in a fixed
shuffled order, so the first N mix names and art styles, tiled into
``weights/heldout.png`` (64 x 64 tiles, 16 per row) with their captions and sources in
``weights/heldout.json``. Run after ``training/fetch_data.py``:

    python training/make_heldout_reference.py --sources noto twemoji openmoji fluent   (the shipped one)
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from common import DATA, WEIGHTS, add_sources_arg, load_images, load_split
from PIL import Image

COLUMNS = 16


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0, help="seed of the shuffled order")
    add_sources_arg(ap)
    args = ap.parse_args()

    images = load_images()
    captions = json.loads((DATA / "captions.json").read_text())
    sources = json.loads((DATA / "sources.json").read_text())
    order = [int(i) for i in np.random.default_rng(args.seed).permutation(load_split(args.sources)["test"])]
    tile = images.shape[1]
    rows = -(-len(order) // COLUMNS)
    sheet = np.full((rows * tile, COLUMNS * tile, 3), 255, np.uint8)
    for j, i in enumerate(order):
        r, c = divmod(j, COLUMNS)
        sheet[r * tile : (r + 1) * tile, c * tile : (c + 1) * tile] = images[i]
    Image.fromarray(sheet).save(WEIGHTS / "heldout.png", optimize=True)
    meta = {
        "tile": tile,
        "columns": COLUMNS,
        "count": len(order),
        "seed": args.seed,
        "captions": [captions[i] for i in order],
        "sources": [sources[i] for i in order],
        "dataset_indices": order,
    }
    (WEIGHTS / "heldout.json").write_text(json.dumps(meta, indent=0) + "\n")
    print(f"wrote {len(order)} held-out images to {WEIGHTS / 'heldout.png'} and heldout.json")


if __name__ == "__main__":
    main()
