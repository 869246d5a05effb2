"""Short animated-emoji clips from the emoji images, for the embedded video model (issue 16).

Each clip moves one emoji with one or two motions composed (geometric ones add into a single affine
pose per frame, a colour fade is applied after): a pan, a zoom, a spin, a bounce, a fade in or out,
or a tint. Every choice comes from a generator seeded by (seed, image, clip), so a rerun writes the
same bytes. Writes, under --out:

  clips.npy     uint8 [M, F, 64, 64, 3]
  clips.json    {"frames": F, "seed": S, "clips": [{"image": i, "caption": "red heart bouncing", "motions": [...]}]}
  tokens.npy    int16 [M, F, 16, 16], with --tokenize: each frame encoded by the shipped emoji VQ

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


def pan(rng) -> Motion:
    direction = rng.choice(["left", "right", "up", "down"])
    reach = rng.uniform(8, 20)
    ux, uy = {"left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1)}[direction]
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
        ink = Image.fromarray((np.asarray(img).min(-1) < 245).astype(np.uint8) * 255)  # leave the background white
        return Image.composite(Image.blend(img, tinted, t), img, ink)

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


def render(img: Image.Image, pose: Pose) -> Image.Image:
    """The image moved by ``pose`` about its centre, on white (Pillow's affine takes the inverse map)."""
    w, h = img.size
    cx, cy = w / 2, h / 2
    a = math.radians(pose.angle)
    cos, sin = math.cos(a) / pose.scale, math.sin(a) / pose.scale
    ox, oy = cx + pose.dx, cy + pose.dy
    matrix = (cos, -sin, cx - cos * ox + sin * oy, sin, cos, cy - sin * ox - cos * oy)
    return img.transform(img.size, Image.AFFINE, matrix, resample=Image.BICUBIC, fillcolor=WHITE)


def make_clip(image: np.ndarray, motions: list[Motion], frames: int) -> np.ndarray:
    """uint8 [frames, H, W, 3]: the motions sampled at evenly spaced times in [0, 1]."""
    img = Image.fromarray(image)
    out = []
    for f in range(frames):
        t = f / max(frames - 1, 1)
        pose = sum((m.pose(t) for m in motions), Pose())
        frame = render(img, pose)
        for m in motions:
            if m.colour is not None:
                frame = m.colour(frame, t)
        out.append(np.asarray(frame, dtype=np.uint8))
    return np.stack(out)


def make_clips(
    images: np.ndarray, captions: list[str], frames: int, per_image: int, seed: int, compose: float = 0.3
) -> tuple[np.ndarray, list[dict]]:
    """Clips [M, F, H, W, 3] and their records, ``per_image`` clips per image, deterministic in ``seed``."""
    clips, records = [], []
    for i, image in enumerate(images):
        for j in range(per_image):
            rng = np.random.default_rng([seed, i, j])
            motions = choose(rng, compose)
            clips.append(make_clip(image, motions, frames))
            words = " and ".join(m.words for m in motions)
            records.append({"image": i, "caption": f"{captions[i]} {words}", "motions": [m.words for m in motions]})
    return np.stack(clips), records


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


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT / "data", help="folder with images.npy and captions.json")
    ap.add_argument("--out", type=Path, default=ROOT / "data" / "clips")
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--clips-per-image", type=int, default=2)
    ap.add_argument("--compose", type=float, default=0.3, help="chance that a clip adds a second motion")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--limit", type=int, default=None, help="use only the first N images")
    ap.add_argument("--tokenize", action="store_true", help="also encode every frame with the emoji VQ")
    ap.add_argument("--weights", type=Path, default=ROOT / "src" / "jacobigen" / "weights" / "vq.safetensors")
    args = ap.parse_args(argv)
    if args.frames < 2 or args.clips_per_image < 1:
        raise SystemExit("--frames must be >= 2 and --clips-per-image >= 1")
    images = np.load(args.data / "images.npy")[: args.limit]
    captions = json.loads((args.data / "captions.json").read_text())[: len(images)]
    clips, records = make_clips(images, captions, args.frames, args.clips_per_image, args.seed, args.compose)
    args.out.mkdir(parents=True, exist_ok=True)
    np.save(args.out / "clips.npy", clips)
    (args.out / "clips.json").write_text(
        json.dumps({"frames": args.frames, "seed": args.seed, "clips": records}, ensure_ascii=False)
    )
    if args.tokenize:
        np.save(args.out / "tokens.npy", tokenize(clips, args.weights))
    print(f"wrote {len(clips)} clips of {args.frames} frames to {args.out}")


if __name__ == "__main__":
    main()
