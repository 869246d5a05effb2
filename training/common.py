"""Helpers shared by the training scripts: paths, dataset loading, checkpoints, logging."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
WEIGHTS = ROOT / "src" / "jacobigen" / "weights"
sys.path.insert(0, str(ROOT / "src"))  # run from a checkout without installing


def add_cpu_args(ap) -> None:
    """--threads and --bf16/--no-bf16, shared by the training scripts. bf16 autocast is on by default
    only where the CPU has bf16 instructions: there it roughly doubles speed, elsewhere it is emulated
    and several times slower (an AVX2-only EPYC: 3.3 s/step fp32, over 5 s/step bf16)."""
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--bf16",
        action=argparse.BooleanOptionalAction,
        default=torch.ops.mkldnn._is_mkldnn_bf16_supported(),
        help="bf16 autocast (default: on where the CPU has AVX512-BF16/AMX)",
    )


def add_sources_arg(ap) -> None:
    ap.add_argument(
        "--sources",
        nargs="+",
        help="only these art sets' images (data/sources.json; default: all), e.g. "
        "noto twemoji openmoji fluent for figures comparable with the data before 2026-12-02",
    )


def load_split(sources: list[str] | None = None) -> dict[str, list[int]]:
    """train/test indices, restricted to the images of `sources` when given."""
    split = json.loads((DATA / "split.json").read_text())
    if sources:
        of = json.loads((DATA / "sources.json").read_text())
        split = {part: [i for i in split[part] if of[i] in sources] for part in ("train", "test")}
    return split


def load_images() -> np.ndarray:
    """uint8 [N, 64, 64, 3]; run training/fetch_data.py first."""
    path = DATA / "images.npy"
    if not path.exists():
        raise SystemExit(f"{path} missing: run `python training/fetch_data.py` first")
    return np.load(path)


def cosine_lr(step: int, total: int, peak: float, warmup: int, floor: float = 0.05) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * t)))


def save_atomic(obj, path: Path) -> None:
    """torch.save through a temp file so a kill mid-write never corrupts last.pt."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


class Log:
    """Appends timestamped lines to a log file and echoes them to stdout."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path

    def __call__(self, msg: str) -> None:
        line = f"{time.strftime('%Y-%m-%d %H:%M:%S')} {msg}"
        print(line, flush=True)
        with self.path.open("a") as f:
            f.write(line + "\n")
