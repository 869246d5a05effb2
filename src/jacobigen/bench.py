"""Side-by-side benchmark: every method on the same prompts and seeds, interleaved, in one process.

Per method and window: forward passes per image, step compression and latency speedup against
``ar`` measured in the same run, the tokens-per-iteration histogram (and the share of iterations
that commit a single token), and the share of wall time spent outside the model forward.
With ``fid``: FID of each row's images against ``ar``'s on other seeds and against held-out data.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image
from tqdm.auto import tqdm

from .costs import block_size, forward_cost_curve, predicted_seconds_per_image
from .fid import features, frechet_distance
from .methods import get_method
from .pipeline import Pipeline


@dataclass
class Row:
    method: str
    window: int
    lossless: bool
    auto: bool = False         # window chosen from the device's cost curve
    runs: int = 0
    nfe: float = 0.0           # forward passes per image (mean)
    wall: float = 0.0          # seconds per image (mean)
    forward: float = 0.0       # seconds in the model forward per image (mean)
    histogram: dict = field(default_factory=dict)
    step_compression: float = 0.0
    latency_speedup: float = 0.0
    fid_vs_ar: float | None = None    # against ar's images on other seeds (ar's own row: the noise)
    fid_vs_data: float | None = None  # against the model's held-out images

    @property
    def single_token_share(self) -> float:
        total = sum(self.histogram.values())
        return self.histogram.get(1, 0) / total if total else 0.0

    @property
    def overhead_share(self) -> float:
        return 1 - self.forward / self.wall if self.wall else 0.0

    def add(self, stats) -> None:
        n = self.runs
        self.nfe = (self.nfe * n + stats.nfe) / (n + 1)
        self.wall = (self.wall * n + stats.wall_time) / (n + 1)
        self.forward = (self.forward * n + stats.forward_time) / (n + 1)
        for k, v in stats.histogram().items():
            self.histogram[k] = self.histogram.get(k, 0) + v
        self.runs = n + 1

    def as_dict(self) -> dict:
        return {**asdict(self), "single_token_share": self.single_token_share,
                "overhead_share": self.overhead_share}


CANDIDATE_WINDOWS = [4, 8, 16, 32, 64]


def choose_window(pipe: Pipeline, spec, prompt: str, seed: int, curve: dict[int, float],
                  **sampling) -> tuple[int, dict[int, float]]:
    """Pilot the method at each candidate window and pick the one with the lowest predicted
    time per image on this device: NFE(window) x forward cost(block size(window))."""
    predicted = {}
    for w in CANDIDATE_WINDOWS:
        gen, _ = pipe.generate(prompt, method=spec.name, window=w, seed=seed, **sampling)
        block = block_size(spec.build(w), pipe.layout)
        predicted[w] = predicted_seconds_per_image(gen.stats.nfe, block, curve)
    return min(predicted, key=predicted.get), predicted


def run_bench(pipe: Pipeline, methods: list[str], windows: list, prompts: list[str],
              seeds: list[int], progress: bool = True, **sampling) -> tuple[list[Row], dict]:
    """Run every (method, window) on every (prompt, seed), interleaved so drift hits all alike.

    ``windows`` may contain "auto": the window is then chosen per method from the device's
    forward cost curve (measured here) and a pilot run. Returns the rows and the cost data.
    """
    specs = [get_method(m) for m in dict.fromkeys(["ar", *methods])]
    fixed = [w for w in windows if w != "auto"]
    extra: dict = {}
    configs = [(s, s.window, False) for s in specs if s.window]
    configs += [(s, w, False) for s in specs if not s.window for w in fixed]
    if "auto" in windows:
        sizes = sorted({1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 160}
                       | {block_size(s.build(w), pipe.layout)
                          for s in specs if not s.window for w in CANDIDATE_WINDOWS})
        curve = forward_cost_curve(pipe.model, sizes)
        extra = {"cost_curve": curve, "auto": {}}
        for s in specs:
            if not s.window:
                best, predicted = choose_window(pipe, s, prompts[0], seeds[0], curve, **sampling)
                extra["auto"][s.name] = {"window": best, "predicted_seconds": predicted}
                configs.append((s, best, True))
    rows = {(s.name, w, a): Row(s.name, w, s.lossless, a) for s, w, a in configs}
    jobs = [(p, seed, s, w, a) for p in prompts for seed in seeds for s, w, a in configs]
    for prompt, seed, spec, w, a in tqdm(jobs, disable=not progress, desc="bench", unit="run"):
        gen, _ = pipe.generate(prompt, method=spec.name, window=w, seed=seed, **sampling)
        rows[spec.name, w, a].add(gen.stats)
    ar = rows["ar", 1, False]
    for r in rows.values():
        r.step_compression = ar.nfe / r.nfe
        r.latency_speedup = ar.wall / r.wall
    order = {s.name: i for i, s in enumerate(specs)}
    return sorted(rows.values(), key=lambda r: (order[r.method], r.auto, r.window)), extra


FID_BATCH = 16  # sequences decoded together when sampling image sets


def sample_images(pipe: Pipeline, method: str, window: int, prompts: list[str], seeds: list[int],
                  **kwargs) -> list[Image.Image]:
    """One image per (prompt, seed), ``FID_BATCH`` sequences in flight (continuous refill)."""
    return pipe.generate(prompts, method=method, window=window, seed=seeds, batch_size=FID_BATCH, **kwargs)[1]


@dataclass
class FidReference:
    """What sample sets are scored against: ``ar`` on a second, disjoint set of seeds, and the
    model's held-out images for the same captions (None when it ships none). Every set scored
    is made from the same ``prompts`` and ``seeds``."""
    pipe: Pipeline
    prompts: list[str]
    seeds: list[int]
    ar: np.ndarray
    data: np.ndarray | None
    source: str
    sampling: dict

    @classmethod
    def build(cls, pipe: Pipeline, n: int, **sampling) -> FidReference:
        data = None
        if pipe.reference is not None:
            captions, images = pipe.reference()
            prompts, data = (captions * n)[:n], features(images[:n])
            source = f"held-out captions; data: their {len(data)} held-out images"
        else:
            prompts = (pipe.example_prompts * n)[:n]
            source = "example prompts; FID vs data skipped: the model ships no held-out images"
        seeds = list(range(n))
        ar = features(sample_images(pipe, "ar", 1, prompts, [n + s for s in seeds], **sampling))
        return cls(pipe, prompts, seeds, ar, data, source, sampling)

    def score(self, method: str, window: int, **options) -> tuple[float, float | None]:
        """(FID vs ar, FID vs data) of this method's images for ``prompts`` and ``seeds``."""
        f = features(sample_images(self.pipe, method, window, self.prompts, self.seeds,
                                   **self.sampling, **options))
        return frechet_distance(f, self.ar), None if self.data is None else frechet_distance(f, self.data)

    def summary(self, ar_scores: tuple[float, float | None]) -> dict:
        """Sample size, prompts, seeds and the noise level, given ``ar``'s own scores (``ar`` on
        ``seeds`` against the reference ``ar`` on the other seeds, and against data)."""
        n = len(self.seeds)
        return {"images": n, "prompts": self.source, "seeds": [0, n], "ar_reference_seeds": [n, 2 * n],
                "ar_vs_ar": ar_scores[0], "ar_vs_data": ar_scores[1],
                "ar_reference_vs_data": None if self.data is None else frechet_distance(self.ar, self.data)}


def run_fid(pipe: Pipeline, rows: list[Row], n: int, progress: bool = True, **sampling) -> dict:
    """Sample ``n`` images per (method, window) row, same prompts and seeds for every row, and set
    the rows' FID figures. ``ar``'s own row against the ``ar`` reference is the noise level: two
    ``ar`` runs with different seeds; a lossless method should land within it."""
    ref = FidReference.build(pipe, n, **sampling)
    scores: dict = {}
    for r in tqdm(rows, disable=not progress, desc=f"FID ({n} images/row)", unit="row"):
        if (r.method, r.window) not in scores:
            scores[r.method, r.window] = ref.score(r.method, r.window)
        r.fid_vs_ar, r.fid_vs_data = scores[r.method, r.window]
    return {"fid": ref.summary(scores["ar", 1])}


def fid_note(fid: dict) -> str:
    """The line under a table with FID columns: sample size and the ar-vs-ar noise level."""
    line = (f"FID over {fid['images']} images per row ({fid['prompts']}). Noise level: ar vs ar on other "
            f"seeds = {fid['ar_vs_ar']:.1f}")
    if fid["ar_vs_data"] is not None:
        line += f"; ar vs data = {fid['ar_vs_data']:.1f} and {fid['ar_reference_vs_data']:.1f} for the two seed sets"
    return line + ".\n"


def fid_cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def md_table(cols: list[str], cells: list[list[str]]) -> str:
    lines = [cols, ["---"] * len(cols), *cells]
    return "".join(f"| {' | '.join(line)} |\n" for line in lines)


def markdown(rows: list[Row], fid: dict | None = None) -> str:
    cols = ["method", "window", "lossless", "NFE/image", "step compression", "latency speedup",
            "1-token iterations", "overhead share"] + (["FID vs ar", "FID vs data"] if fid else [])
    cells = [[r.method, f"{'auto: ' if r.auto else ''}{r.window}", "yes" if r.lossless else "no", f"{r.nfe:.1f}",
              f"{r.step_compression:.2f}x", f"{r.latency_speedup:.2f}x", f"{100 * r.single_token_share:.0f}%",
              f"{100 * r.overhead_share:.0f}%"] + ([fid_cell(r.fid_vs_ar), fid_cell(r.fid_vs_data)] if fid else [])
             for r in rows]
    return md_table(cols, cells) + ("\n" + fid_note(fid) if fid else "")


def write_report(rows: list[Row], extra: dict, out_dir: Path, meta: dict) -> None:
    from .plots import plot_bench

    out_dir.mkdir(parents=True, exist_ok=True)
    data = {**meta, **extra, "rows": [r.as_dict() for r in rows]}
    (out_dir / "bench.json").write_text(json.dumps(data, indent=2))
    (out_dir / "bench.md").write_text(markdown(rows, extra.get("fid")))
    plot_bench(rows, extra.get("cost_curve"), out_dir, extra.get("fid"))
