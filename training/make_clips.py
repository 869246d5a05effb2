"""Short animated-emoji clips from the emoji images, for the embedded video model (issues 16, 42).

Two styles. `moving` (issue 16, the first shipped model's data) moves one emoji with one or two
motions composed (geometric ones add into a single affine pose per frame, a colour change is applied
after): a pan, a zoom, a spin, a bounce, a fade in or out, or a tint; nearly every code changes
every frame. `still` (issue 42, the default) behaves like real video: the emoji stands on a fixed
background, often smaller than the frame, and between frames it holds still, drifts by a pixel or
two, turns by a few degrees, or changes one region (a blink, a flash of colour), so most codes carry
over from one frame to the next. Every choice comes from a generator seeded by (seed, image, clip),
so a rerun writes the same bytes. Writes, under --out:

  clips.npy     uint8 [M, F, 64, 64, 3]
  clips.json    {"frames": F, "seed": S, "style": ..., "clips": [{"image": i, "caption": "red heart
                drifting left", "motions": [...]}], "unchanged_share": x (with --tokenize)}
  tokens.npy    int16 [M, F, 16, 16], with --tokenize: each frame encoded by the shipped emoji VQ

unchanged_share is the fraction of codes equal to the code of the same cell one frame earlier, over
all clips and frame pairs: what a frame-copy drafter can hope to copy.

The image index lets the training split follow data/split.json (held-out emoji stay held out).

Run: python training/make_clips.py --data /path/to/data --frames 8 --clips-per-image 2
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
WHITE = (255, 255, 255)
TINTS = {"red": (230, 40, 40), "blue": (40, 90, 230), "green": (40, 170, 60), "purple": (150, 60, 200)}
DIRECTIONS = {"left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1)}


def ink(img: Image.Image) -> np.ndarray:
    """bool [H, W]: the emoji's pixels, not the white background."""
    return np.asarray(img).min(-1) < 245


@dataclass(frozen=True)
class Pose:
    """Where the emoji is at one instant: shift in pixels, scale, counter-clockwise angle in degrees."""

    dx: float = 0.0
    dy: float = 0.0
    scale: float = 1.0
    angle: float = 0.0

    def __add__(self, other: Pose) -> Pose:
        return Pose(self.dx + other.dx, self.dy + other.dy, self.scale * other.scale, self.angle + other.angle)


@dataclass(frozen=True)
class Motion:
    """One motion: its caption words, its pose at time t in [0, 1], and its colour change."""

    words: str
    pose: Callable[[float], Pose] = lambda t: Pose()
    colour: Callable[[Image.Image, float], Image.Image] | None = None
    paint: Callable[[Image.Image, float], Image.Image] | None = None  # on the emoji, before it is posed


def pan(rng) -> Motion:
    direction = rng.choice(list(DIRECTIONS))
    reach = rng.uniform(8, 20)
    ux, uy = DIRECTIONS[direction]
    return Motion(f"moving {direction}", lambda t: Pose(ux * reach * (2 * t - 1), uy * reach * (2 * t - 1)))


def zoom(rng) -> Motion:
    small = rng.uniform(0.4, 0.7)
    grow = bool(rng.integers(2))
    start, end = (small, 1.0) if grow else (1.0, small)
    return Motion("zooming in" if grow else "zooming out", lambda t: Pose(scale=start * (end / start) ** t))


def spin(rng) -> Motion:
    clockwise = bool(rng.integers(2))
    turn = rng.uniform(90, 360) * (-1 if clockwise else 1)
    return Motion("spinning clockwise" if clockwise else "spinning counterclockwise", lambda t: Pose(angle=turn * t))


def bounce(rng) -> Motion:
    height, hops = rng.uniform(8, 16), int(rng.integers(1, 3))
    return Motion("bouncing", lambda t: Pose(dy=-height * abs(math.sin(math.pi * hops * t))))


def fade(rng) -> Motion:
    appear = bool(rng.integers(2))

    def colour(img: Image.Image, t: float) -> Image.Image:
        return Image.blend(Image.new("RGB", img.size, WHITE), img, t if appear else 1 - t)

    return Motion("fading in" if appear else "fading out", colour=colour)


def tint(rng) -> Motion:
    name = str(rng.choice(sorted(TINTS)))

    def colour(img: Image.Image, t: float) -> Image.Image:
        tinted = Image.blend(img, Image.new("RGB", img.size, TINTS[name]), 0.6)
        mask = Image.fromarray(ink(img).astype(np.uint8) * 255)  # leave the background white
        return Image.composite(Image.blend(img, tinted, t), img, mask)

    return Motion(f"turning {name}", colour=colour)


GEOMETRIC = [pan, zoom, spin, bounce]
COLOUR = [fade, tint]


def choose(rng, compose: float) -> list[Motion]:
    """One motion of any kind; with probability ``compose`` a second one of the other kind."""
    kinds = GEOMETRIC + COLOUR
    first = kinds[int(rng.integers(len(kinds)))]
    motions = [first(rng)]
    if rng.random() < compose:
        other = COLOUR if first in GEOMETRIC else GEOMETRIC
        motions.append(other[int(rng.integers(len(other)))](rng))
    return motions


# The `still` style: what real video does between two frames (a code covers 4x4 pixels).


def hold(rng) -> Motion:
    return Motion("standing still")


REACH = (2.0, 6.0)  # drift, pixels over the whole clip: sub-code steps (--reach)


def drift(rng, reach: tuple[float, float] = REACH, step: float | None = None, centred: bool = False) -> Motion:
    """``step``: every pose a whole number of steps from the first (4 px, a code: the VQ's tokens of
    the moved emoji are then its earlier tokens one column over, which a clip model can copy).
    ``centred``: start half the reach back, so that a long drift crops the emoji at neither end."""
    direction = rng.choice(list(DIRECTIONS))
    reach = rng.uniform(*reach)
    ux, uy = DIRECTIONS[direction]
    back = (reach / 2 if step is None else step * (reach // 2 // step)) if centred else 0.0

    def shift(t: float) -> float:
        return (reach * t if step is None else step * round(reach * t / step)) - back

    return Motion(f"drifting {direction}", lambda t: Pose(ux * shift(t), uy * shift(t)))


def turn(rng) -> Motion:
    clockwise = bool(rng.integers(2))
    angle = rng.uniform(6, 20) * (-1 if clockwise else 1)
    return Motion(f"turning slowly {'clockwise' if clockwise else 'counterclockwise'}", lambda t: Pose(angle=angle * t))


def breathe(rng) -> Motion:
    grow = bool(rng.integers(2))
    end = 1 + rng.uniform(0.05, 0.12) * (1 if grow else -1)
    return Motion("growing slightly" if grow else "shrinking slightly", lambda t: Pose(scale=end**t))


def region_change(rng, words: str, colour: tuple[int, int, int], strength: float) -> Motion:
    """One box on the emoji's ink takes ``colour`` for a stretch of the clip, then returns."""
    w, h = (int(v) for v in rng.integers(10, 21, size=2))
    fx, fy = rng.uniform(0.2, 0.8, size=2)  # the box's centre, as a fraction of the ink's bounding box
    start = rng.uniform(0, 0.7)
    stop = start + rng.uniform(0.15, 0.45)

    def paint(img: Image.Image, t: float) -> Image.Image:
        drawn = ink(img)
        if not start <= t <= stop or not drawn.any():
            return img
        ys, xs = np.nonzero(drawn)
        cx = int(xs.min() + fx * (xs.max() - xs.min()))
        cy = int(ys.min() + fy * (ys.max() - ys.min()))
        box = (max(cx - w // 2, 0), max(cy - h // 2, 0), min(cx + w // 2, img.width), min(cy + h // 2, img.height))
        part = img.crop(box)
        mask = Image.fromarray(drawn[box[1] : box[3], box[0] : box[2]].astype(np.uint8) * 255)
        changed = Image.blend(part, Image.new("RGB", part.size, colour), strength)
        out = img.copy()
        out.paste(Image.composite(changed, part, mask), box)
        return out

    return Motion(words, paint=paint)


def blink(rng) -> Motion:
    return region_change(rng, "blinking", (20, 20, 20), 0.8)


def flash(rng) -> Motion:
    name = str(rng.choice(sorted(TINTS)))
    return region_change(rng, f"flashing {name}", TINTS[name], 0.7)


STILL_GEOMETRIC = [hold, drift, drift, turn, breathe]
LOCAL = [blink, flash]


def choose_still(
    rng,
    compose: float,
    reach: tuple[float, float] = REACH,
    step: float | None = None,
    drifts: float | None = None,
    centred: bool = False,
) -> list[Motion]:
    """A gentle motion or one local change; with probability ``compose`` a local change on a motion.
    ``drifts``: the share of clips that drift (default: as likely as each other kind)."""
    kinds = STILL_GEOMETRIC + LOCAL
    if drifts is None:
        first = kinds[int(rng.integers(len(kinds)))]
    else:
        others = [k for k in kinds if k is not drift]
        first = drift if rng.random() < drifts else others[int(rng.integers(len(others)))]
    motions = [first(rng, reach, step, centred) if first is drift else first(rng)]
    if first in STILL_GEOMETRIC and first is not hold and rng.random() < compose:
        motions.append(LOCAL[int(rng.integers(len(LOCAL)))](rng))
    return motions


def placement(rng) -> Pose:
    """Where the emoji stands for the whole clip: half the clips full size, the rest smaller and off centre."""
    if rng.random() < 0.5:
        return Pose()
    scale = rng.uniform(0.55, 0.85)
    room = (1 - scale) * 32 * 0.8
    return Pose(rng.uniform(-room, room), rng.uniform(-room, room), scale)


def fits_and_starts(rng, frames: int, move: float) -> list[float]:
    """Motion times for each frame: each step moves on with probability ``move`` and holds otherwise."""
    steps = np.concatenate([[0], np.cumsum(rng.random(frames - 1) < move)])
    return (steps / max(steps[-1], 1)).tolist()


def render(img: Image.Image, pose: Pose) -> Image.Image:
    """The image moved by ``pose`` about its centre, on white (Pillow's affine takes the inverse map)."""
    w, h = img.size
    cx, cy = w / 2, h / 2
    a = math.radians(pose.angle)
    cos, sin = math.cos(a) / pose.scale, math.sin(a) / pose.scale
    ox, oy = cx + pose.dx, cy + pose.dy
    matrix = (cos, -sin, cx - cos * ox + sin * oy, sin, cos, cy - sin * ox - cos * oy)
    return img.transform(img.size, Image.AFFINE, matrix, resample=Image.BICUBIC, fillcolor=WHITE)


def make_clip(
    image: np.ndarray, motions: list[Motion], frames: int, place: Pose = Pose(), times: list[float] | None = None
) -> np.ndarray:
    """uint8 [frames, H, W, 3]: the motions sampled at evenly spaced times in [0, 1] (poses at
    ``times`` when given), the emoji standing at ``place``."""
    img = Image.fromarray(image)
    out = []
    for f in range(frames):
        t = f / max(frames - 1, 1)
        drawn = img
        for m in motions:
            if m.paint is not None:
                drawn = m.paint(drawn, t)
        moved = t if times is None else times[f]
        frame = render(drawn, sum((m.pose(moved) for m in motions), place))
        for m in motions:
            if m.colour is not None:
                frame = m.colour(frame, t)
        out.append(np.asarray(frame, dtype=np.uint8))
    return np.stack(out)


def make_clips(
    images: np.ndarray,
    captions: list[str],
    frames: int,
    per_image: int,
    seed: int,
    compose: float = 0.3,
    style: str = "still",
    move: float = 0.6,
    reach: tuple[float, float] = REACH,
    indices: list[int] | None = None,
    step: float | None = None,
    drifts: float | None = None,
    centred: bool = False,
) -> tuple[np.ndarray, list[dict]]:
    """Clips [M, F, H, W, 3] and their records, ``per_image`` clips per image (of ``indices``, default
    all), deterministic in ``seed``."""
    clips, records = [], []
    for i in range(len(images)) if indices is None else indices:
        image = images[i]
        for j in range(per_image):
            rng = np.random.default_rng([seed, i, j])
            if style == "moving":
                motions = choose(rng, compose)
                clips.append(make_clip(image, motions, frames))
            else:
                motions = choose_still(rng, compose, reach, step, drifts, centred)
                place, times = placement(rng), fits_and_starts(rng, frames, move)
                clips.append(make_clip(image, motions, frames, place, times))
            words = " and ".join(m.words for m in motions)
            record = {"image": i, "clip": j, "caption": f"{captions[i]} {words}", "motions": [m.words for m in motions]}
            records.append(record)
    return np.stack(clips), records


def unchanged_share(tokens: np.ndarray) -> float:
    """Fraction of codes equal to the same cell's code one frame earlier ([M, F, 16, 16] tokens)."""
    return float((tokens[:, 1:] == tokens[:, :-1]).mean())


def tokenize(clips: np.ndarray, weights: Path) -> np.ndarray:
    """Every frame through the shipped emoji VQ: int16 [M, F, 16, 16]."""
    import sys

    import torch

    sys.path.insert(0, str(ROOT / "src"))
    from jacobigen.models.vq import VQModel

    vq = VQModel.load(weights)
    flat = torch.from_numpy(clips.reshape(-1, *clips.shape[2:])).permute(0, 3, 1, 2).contiguous()
    with torch.no_grad():
        codes = np.concatenate(
            [vq.encode(flat[k : k + 256]).numpy().astype(np.int16) for k in range(0, len(flat), 256)]
        )
    return codes.reshape(*clips.shape[:2], *codes.shape[1:])


def curated(data: Path, captions: list[str], styles: list[str]) -> list[int]:
    """The image of each curated name, from the first of ``styles`` (art sets) that has it: the
    images `train_ar.py --names --style` trains the names model on."""
    from train_ar import curated_run

    keywords = json.loads((data / "keywords.json").read_text())
    return curated_run(captions, keywords, {"test": []}, [], styles, data / "sources.json")[0]["train"]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT / "data", help="folder with images.npy and captions.json")
    ap.add_argument("--out", type=Path, default=ROOT / "data" / "clips")
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--clips-per-image", type=int, default=2)
    ap.add_argument("--style", choices=["still", "moving"], default="still", help="still (issue 42) or moving (16)")
    ap.add_argument("--compose", type=float, default=0.3, help="chance that a clip adds a second motion")
    ap.add_argument("--move", type=float, default=0.6, help="still style: chance a frame moves on")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--limit", type=int, default=None, help="use only the first N images")
    ap.add_argument("--tokenize", action="store_true", help="also encode every frame with the emoji VQ")
    ap.add_argument(
        "--names",
        nargs="+",
        metavar="SET",
        help="only the curated names (training/vocabulary.py), one image each from the first listed art set "
        "that has it, as train_ar.py --names --style SET (for a video model from the emoji-names model)",
    )
    ap.add_argument("--reach", type=float, nargs=2, default=REACH, metavar=("LO", "HI"), help="drift, pixels per clip")
    ap.add_argument("--drift-step", type=float, help="drift in whole steps of this many pixels (4: a code)")
    ap.add_argument("--centred", action="store_true", help="a drift starts half its reach back (long drifts)")
    ap.add_argument("--drifts", type=float, help="share of clips that drift (default: as likely as each other kind)")
    ap.add_argument("--weights", type=Path, default=ROOT / "src" / "jacobigen" / "weights" / "vq.safetensors")
    args = ap.parse_args(argv)
    if args.frames < 2 or args.clips_per_image < 1:
        raise SystemExit("--frames must be >= 2 and --clips-per-image >= 1")
    images = np.load(args.data / "images.npy", mmap_mode="r")[: args.limit]
    captions = json.loads((args.data / "captions.json").read_text())[: len(images)]
    indices = curated(args.data, captions, args.names) if args.names else None
    clips, records = make_clips(
        images, captions, args.frames, args.clips_per_image, args.seed, args.compose, args.style, args.move,
        tuple(args.reach), indices, args.drift_step, args.drifts, args.centred,
    )  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    np.save(args.out / "clips.npy", clips)
    meta = {"frames": args.frames, "seed": args.seed, "style": args.style, "reach": list(args.reach),
            "drift_step": args.drift_step, "drifts": args.drifts, "centred": args.centred,
            "clips": records}  # fmt: skip
    if args.names:
        meta["names"] = args.names
    if args.tokenize:
        tokens = tokenize(clips, args.weights)
        np.save(args.out / "tokens.npy", tokens)
        meta["unchanged_share"] = round(unchanged_share(tokens), 4)
        print(f"unchanged-token share between consecutive frames: {meta['unchanged_share']:.1%}")
    (args.out / "clips.json").write_text(json.dumps(meta, ensure_ascii=False))
    print(f"wrote {len(clips)} clips of {args.frames} frames to {args.out}")


if __name__ == "__main__":
    main()
