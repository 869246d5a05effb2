"""Does a clip model do the motion its caption names? Per prompt and seed, where the emoji's ink
stands in each frame (the centroid of its non-white pixels, in pixels of the 64-px frame), and
whether it moved by at least one code (4 px) the way the caption says, and more that way than across.

    python training/clip_motion.py --model emoji-names-video --prompts "red heart drifting left" --seeds 4

prints one line per clip and, with ``--out``, writes them as JSON with the commit and the weights'
sha256; every clip decodes with the model's own sampling and a lossless method, so this measures the
model's distribution, not the method's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

DIRECTIONS = {"left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1)}
CODE = 4.0  # pixels a code covers: a move of less is not a move the tokens drew


def centroid(frame: np.ndarray, floor: float = 0.1) -> tuple[float, float]:
    """(x, y) of the ink of an RGB frame on white, ink being each pixel's darkness above ``floor``."""
    ink = 1 - frame.astype(float).sum(-1) / (255 * 3)
    ink[ink < floor] = 0
    if ink.sum() == 0:
        return float("nan"), float("nan")
    yy, xx = np.mgrid[: ink.shape[0], : ink.shape[1]]
    return float((ink * xx).sum() / ink.sum()), float((ink * yy).sum() / ink.sum())


def moved(path: list[tuple[float, float]], direction: str) -> bool:
    """The ink went at least a code ``direction`` from the first frame to the last, more than across."""
    (x0, y0), (x1, y1) = path[0], path[-1]
    ux, uy = DIRECTIONS[direction]
    along, across = (x1 - x0) * ux + (y1 - y0) * uy, abs((x1 - x0) * uy) + abs((y1 - y0) * ux)
    return bool(along >= CODE and along > across)


def contact_sheet(clips: list[list], size: int = 64):
    """One row per clip, one column per frame: what a reader checks the centroids against."""
    from PIL import Image

    sheet = Image.new("RGB", (size * max(len(c) for c in clips), size * len(clips)), "white")
    for r, clip in enumerate(clips):
        for f, frame in enumerate(clip):
            sheet.paste(frame.convert("RGB").resize((size, size)), (f * size, r * size))
    return sheet


def direction_of(prompt: str) -> str | None:
    words = prompt.split()
    return (
        next((w for w in words[words.index("drifting") + 1 :] if w in DIRECTIONS), None)
        if "drifting" in words
        else None
    )


def main(argv: list[str] | None = None) -> None:
    from jacobigen.models import load_bundle
    from jacobigen.tools.threads import environment

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="emoji-names-video")
    ap.add_argument("--prompts", nargs="+", default=["red heart drifting left"])
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--method", default="scd-gs+copy")
    ap.add_argument("--window", type=int, default=32)
    ap.add_argument("--sampling", type=json.loads, default={}, help="over the model's own, e.g. '{\"cfg\": 1}'")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], help="default: the model's own on this machine")
    ap.add_argument("--sheet", type=Path, help="also save every clip's frames as one PNG (a row per clip)")
    args = ap.parse_args(argv)
    bundle = load_bundle(args.model, "cpu", dtype=args.dtype)
    rows, drawn = [], []
    for prompt in args.prompts:
        _, clips = bundle.generate([prompt] * args.seeds, method=args.method, window=args.window,
                                   seed=list(range(args.seeds)), **args.sampling)  # fmt: skip
        drawn.extend(clips)
        for seed, clip in enumerate(clips):
            path = [centroid(np.asarray(f.convert("RGB").resize((64, 64)))) for f in clip]
            way = direction_of(prompt)
            row = {"prompt": prompt, "seed": seed, "x": [round(x, 1) for x, _ in path],
                   "y": [round(y, 1) for _, y in path],
                   "moved_as_named": moved(path, way) if way else None}  # fmt: skip
            rows.append(row)
            print(f"{prompt!r} seed {seed}: x {row['x'][0]} -> {row['x'][-1]}, y {row['y'][0]} -> {row['y'][-1]}"
                  + ("" if way is None else f", moved {way}: {row['moved_as_named']}"))  # fmt: skip
    summary = {"model": bundle.name, **environment(bundle.model, args.model), "method": args.method,
               "window": args.window, "sampling": {**bundle.defaults, **args.sampling}, "clips": rows}  # fmt: skip
    for prompt in args.prompts:
        hits = [r["moved_as_named"] for r in rows if r["prompt"] == prompt and r["moved_as_named"] is not None]
        if hits:
            print(f"{prompt!r}: moved as named in {sum(hits)} of {len(hits)} seeds")
    if args.sheet:
        contact_sheet(drawn).save(args.sheet)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
