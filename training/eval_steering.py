"""Does the caption steer? Retrieval of generated images among the dataset's images.

For emoji names from the held-out split (never trained on) and from the training split, generate
images and rank a gallery of dataset images by cosine similarity of Inception pool features (the
FID network of the ``eval`` extra). A hit at k: one of the k nearest gallery images has the
prompt's name (``name@k``) or its emoji subgroup, e.g. face-smiling (``subgroup@k``). The chance
level scores the same images against another prompt's name (a fixed derangement of the prompts):
what retrieval gives when the caption is ignored. The gallery: every held-out image, every image
of the evaluated training names, and a fixed sample of other training images as distractors.
With ``--curated`` the prompts are every name of the curated vocabulary (training/vocabulary.py),
whatever their split, and the gallery every image of those names plus the distractors.

    python training/eval_steering.py --out checkpoints/steering/before.json
    PYTHONPATH=/path/to/other/src python training/eval_steering.py ...   (another version's model)
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
import torch
import vocabulary
from common import DATA, add_cpu_args, add_sources_arg, load_images, load_split
from fetch_data import split_group
from PIL import Image

from jacobigen.core.errors import PromptWarning
from jacobigen.models import load_bundle
from jacobigen.tools import fid

KS = (1, 10)


def pick_names(captions: list[str], indices, n: int, rng: np.random.Generator) -> list[str]:
    """n distinct emoji names (skin tones removed) drawn from the images at `indices`."""
    names = sorted({split_group(captions[i]) for i in indices})
    return [str(s) for s in rng.choice(names, size=min(n, len(names)), replace=False)]


def gallery_indices(captions, split, names: set[str], distractors: int, rng, held_out: bool = True) -> np.ndarray:
    """Every image of `names` in the training split (both splits without `held_out`), every held-out
    image (with `held_out`), and `distractors` other training images."""
    pool = split["train"] if held_out else [*split["train"], *split["test"]]
    own = [i for i in pool if split_group(captions[i]) in names]
    others = np.setdiff1d(split["train"], own)
    held = split["test"] if held_out else []
    return np.array(sorted({*held, *own, *rng.choice(others, distractors, replace=False).tolist()}))


def gallery_features(images: np.ndarray, indices: np.ndarray, cache: Path) -> np.ndarray:
    """Unit-norm features of the gallery, computed once per gallery and cached in data/."""
    if cache.exists():
        saved = np.load(cache)
        if np.array_equal(saved["indices"], indices):
            return saved["features"]
    feats = fid.features([Image.fromarray(images[i]) for i in indices])
    feats /= np.linalg.norm(feats, axis=1, keepdims=True)
    np.savez(cache, indices=indices, features=feats)
    return feats


def hits(order: np.ndarray, labels: np.ndarray, targets: list[str]) -> dict[int, float]:
    """Fraction of rows whose k nearest gallery labels contain the row's target, per k."""
    return {k: float(np.mean([t in labels[row[:k]] for row, t in zip(order, targets, strict=True)])) for k in KS}


def derangement(n: int, rng) -> np.ndarray:
    while True:
        p = rng.permutation(n)
        if n < 2 or not np.any(p == np.arange(n)):
            return p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--names", type=int, default=40, help="names per split")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--distractors", type=int, default=2000)
    ap.add_argument("--method", default="scd-mc")
    ap.add_argument("--cfg", type=float, help="guidance scale (default: the model's recommended sampling)")
    ap.add_argument("--temperature", type=float, help="sampling temperature (default: the model's)")
    ap.add_argument("--top-k", type=int, help="top-k (default: the model's)")
    ap.add_argument("--top-p", type=float, help="top-p (default: the model's)")
    ap.add_argument("--curated", action="store_true", help="prompt every curated name (training/vocabulary.py)")
    ap.add_argument("--out", type=Path, required=True)
    add_sources_arg(ap)
    add_cpu_args(ap)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore", PromptWarning)  # held-out names hold words no model saw: expected
    t0 = time.time()

    images, split = load_images(), load_split(args.sources)
    captions = json.loads((DATA / "captions.json").read_text())
    keywords = json.loads((DATA / "keywords.json").read_text())
    rng = np.random.default_rng(0)
    if args.curated:
        prompts = {"curated": vocabulary.all_names()}
        index = gallery_indices(captions, split, {*prompts["curated"]}, args.distractors, rng, held_out=False)
    else:
        prompts = {
            "held-out": pick_names(captions, split["test"], args.names, rng),
            "train": pick_names(captions, split["train"], args.names, rng),
        }
        index = gallery_indices(captions, split, {*prompts["train"]}, args.distractors, rng)
    gallery = gallery_features(images, index, DATA / f"steering_gallery{'_curated' * args.curated}.npz")
    names = np.array([split_group(captions[i]) for i in index])
    subgroup_of = {split_group(c): kw["subgroup"] or split_group(c) for c, kw in zip(captions, keywords, strict=True)}
    subgroups = np.array([subgroup_of[n] for n in names])

    pipe = load_bundle(args.model, device="cpu")
    sampling = {k: getattr(args, k) for k in ("cfg", "temperature", "top_k", "top_p") if getattr(args, k) is not None}
    report = {
        "model": args.model,
        "method": args.method,
        "seeds": args.seeds,
        "gallery": len(index),
        "sources": args.sources or "all",
        "sampling": {**pipe.defaults, **sampling},
        "splits": {},
    }
    for split_name, texts in prompts.items():
        generated, targets = [], []
        for seed in range(args.seeds):
            _, pics = pipe.generate(texts, method=args.method, seed=1000 * seed, **sampling)
            generated += pics
            targets += texts
        feats = fid.features(generated)
        feats /= np.linalg.norm(feats, axis=1, keepdims=True)
        order = np.argsort(-feats @ gallery.T, axis=1)[:, : max(KS)]
        chance = [targets[j] for j in derangement(len(texts), rng)] * args.seeds
        row = {
            "prompts": texts,
            "images": len(targets),
            "name": hits(order, names, targets),
            "name_chance": hits(order, names, chance),
            "subgroup": hits(order, subgroups, [subgroup_of[t] for t in targets]),
            "subgroup_chance": hits(order, subgroups, [subgroup_of[t] for t in chance]),
        }
        report["splits"][split_name] = row
        print(split_name, {k: v for k, v in row.items() if k != "prompts"}, flush=True)
    report["seconds"] = round(time.time() - t0)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
