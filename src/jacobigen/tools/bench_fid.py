"""FID of the bench's rows: every (method, window) samples the same prompts and seeds, scored
against ``ar`` on other seeds and against the model's held-out images."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image
from tqdm.auto import tqdm

from ..core.checks import image_seeds
from ..models.bundle import ModelBundle
from .bench_rows import PLAIN, Row
from .fid import features, frechet_distance

FID_BATCH = 16  # sequences decoded together when sampling image sets


def sample_images(
    pipe: ModelBundle, method: str, window: int, prompts: list[str], seeds: list[int], **kwargs
) -> list[Image.Image]:
    """One image per (prompt, seed), ``FID_BATCH`` sequences in flight (continuous refill)."""
    return pipe.generate(prompts, method=method, window=window, seed=seeds, batch_size=FID_BATCH, **kwargs)[1]


@dataclass
class FidReference:
    """What sample sets are scored against: ``ar`` on a second, disjoint set of seeds, and the
    model's held-out images for the same captions (None when it ships none). Every set scored
    is made from the same ``prompts`` and ``seeds``."""

    pipe: ModelBundle
    prompts: list[str]
    seeds: list[int]
    ar: np.ndarray
    data: np.ndarray | None
    source: str
    sampling: dict

    @classmethod
    def build(cls, pipe: ModelBundle, n: int, **sampling) -> FidReference:
        data = None
        if pipe.reference is not None:
            captions, images = pipe.reference()
            prompts, data = (captions * n)[:n], features(images[:n])
            source = f"held-out captions; data: their {len(data)} held-out images"
        else:
            prompts = (pipe.example_prompts * n)[:n]
            source = "example prompts; FID vs data skipped: the model ships no held-out images"
        seeds = image_seeds(0, n)
        ar = features(sample_images(pipe, "ar", 1, prompts, image_seeds(n, n), **sampling))  # disjoint seeds
        return cls(pipe, prompts, seeds, ar, data, source, sampling)

    def score(self, method: str, window: int, **options) -> tuple[float, float | None]:
        """(FID vs ar, FID vs data) of this method's images for ``prompts`` and ``seeds``."""
        f = features(sample_images(self.pipe, method, window, self.prompts, self.seeds, **self.sampling, **options))
        return frechet_distance(f, self.ar), None if self.data is None else frechet_distance(f, self.data)

    def summary(self, ar_scores: tuple[float, float | None]) -> dict:
        """Sample size, prompts, seeds and the noise level, given ``ar``'s own scores (``ar`` on
        ``seeds`` against the reference ``ar`` on the other seeds, and against data)."""
        n = len(self.seeds)
        return {
            "images": n,
            "prompts": self.source,
            "seeds": [0, n],
            "ar_reference_seeds": [n, 2 * n],
            "ar_vs_ar": ar_scores[0],
            "ar_vs_data": ar_scores[1],
            "ar_reference_vs_data": None if self.data is None else frechet_distance(self.ar, self.data),
        }


def run_fid(pipe: ModelBundle, rows: list[Row], n: int, progress: bool = True, **sampling) -> dict:
    """Sample ``n`` images per (method, window) row, same prompts and seeds for every row, and set
    the rows' FID figures. ``ar``'s own row against the ``ar`` reference is the noise level: two
    ``ar`` runs with different seeds; a lossless method should land within it."""
    ref = FidReference.build(pipe, n, **sampling)
    scores: dict = {}
    for r in tqdm(
        [r for r in rows if r.method != PLAIN], disable=not progress, desc=f"FID ({n} images/row)", unit="row"
    ):  # the plain loop samples AR's distribution by construction
        if (r.method, r.window) not in scores:
            scores[r.method, r.window] = ref.score(r.method, r.window)
        r.fid_vs_ar, r.fid_vs_data = scores[r.method, r.window]
    return {"fid": ref.summary(scores["ar", 1])}
