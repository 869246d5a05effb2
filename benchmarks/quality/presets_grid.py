"""One prompt through every lossless preset, one image each, side by side (issue 60's check of the main job).

Each lossless preset samples the model's own distribution, so the row shows what a user gets for
the prompt whichever preset ``auto`` picks: if one image misses, the distribution is what is weak.

    python benchmarks/quality/presets_grid.py --prompt "grinning face" --window 16 --seed 0 \\
        --temperature 0.5 --top-k 50 --out benchmarks/quality/presets-grinning-face.png

``--both`` draws two rows, the papers' verifiers above and ``--same-as-ar`` below (the invariant
verifier: every preset commits ``ar``'s own tokens for the seed; README's picture).
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
    ap.add_argument("--presets", help="comma-separated (default: every lossless preset)")
    ap.add_argument("--deterministic", action="store_true")
    ap.add_argument("--both", action="store_true", help="a row as the papers verify, and a row --same-as-ar")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    bundle = load_bundle(args.model, dtype=args.dtype)
    sampling = {k: v for k, v in (("temperature", args.temperature), ("top_k", args.top_k)) if v is not None}
    presets = args.presets.split(",") if args.presets else [name for name, m in METHODS.items() if m.lossless]
    rows = [("rejection sampling (the papers)", False), ("--same-as-ar", True)] if args.both else [("", False)]
    label, size = 14, args.size
    sheet = Image.new("RGB", (size * len(presets), (size + label) * len(rows) + (label if args.both else 0)), "white")
    draw = ImageDraw.Draw(sheet)
    y = 0
    for title, same in rows:
        if title:
            draw.text((2, y + 1), title, fill="black")
            y += label
        for i, name in enumerate(presets):
            _, images = bundle.generate(
                args.prompt,
                method=name,
                window=args.window,
                seed=args.seed,
                same_as_ar=same,
                deterministic=args.deterministic,
                **sampling,
            )
            sheet.paste(images[0].resize((size, size), Image.NEAREST), (i * size, y + label))
            draw.text((i * size + 2, y + 1), name, fill="black")
        y += size + label
    args.out.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(args.out)
    made = {"prompt": args.prompt, "presets": presets, "window": args.window, "seed": args.seed, **sampling}
    made |= {"both": args.both, "deterministic": args.deterministic, "dtype": bundle.dtype}
    args.out.with_suffix(".json").write_text(json.dumps({**made, "model": args.model, **git_commit()}, indent=2))
    print(f"{args.out}: {', '.join(presets)}")


if __name__ == "__main__":
    main()
