"""One prompt through every lossless preset, one image each, side by side (issue 60's check of the main job).

Each lossless preset samples the model's own distribution, so the row shows what a user gets for
the prompt whichever preset ``auto`` picks: if one image misses, the distribution is what is weak.

    python benchmarks/quality/presets_grid.py --prompt "grinning face" --window 16 --seed 0 \\
        --temperature 0.5 --top-k 50 --out benchmarks/quality/presets-grinning-face.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from PIL import Image, ImageDraw

from jacobigen.decode.methods import METHODS
from jacobigen.models import load_bundle
from jacobigen.tools.threads import git_commit


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], help="the model dtype (default: its own here)")
    ap.add_argument("--prompt", default="grinning face")
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--temperature", type=float)
    ap.add_argument("--top-k", type=int)
    ap.add_argument("--size", type=int, default=96)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    bundle = load_bundle(args.model, dtype=args.dtype)
    sampling = {k: v for k, v in (("temperature", args.temperature), ("top_k", args.top_k)) if v is not None}
    presets = [name for name, m in METHODS.items() if m.lossless]
    tiles = []
    for name in presets:
        _, images = bundle.generate(args.prompt, method=name, window=args.window, seed=args.seed, **sampling)
        tiles.append((name, images[0].resize((args.size, args.size), Image.NEAREST)))
    label = 14
    sheet = Image.new("RGB", (args.size * len(tiles), args.size + label), "white")
    draw = ImageDraw.Draw(sheet)
    for i, (name, tile) in enumerate(tiles):
        sheet.paste(tile, (i * args.size, label))
        draw.text((i * args.size + 2, 1), name, fill="black")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(args.out)
    made = {"prompt": args.prompt, "presets": presets, "window": args.window, "seed": args.seed, **sampling}
    args.out.with_suffix(".json").write_text(json.dumps({**made, "model": args.model, **git_commit()}, indent=2))
    print(f"{args.out}: {', '.join(presets)}")


if __name__ == "__main__":
    main()
