"""Side-by-side benchmark: every method on the same prompts and seeds, interleaved, in one process.

Per method and window: forward passes per image, step compression and latency speedup against
``ar`` measured in the same run, the tokens-per-iteration histogram (and the share of iterations
that commit a single token), and the share of wall time spent outside the model forward.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from .costs import block_size, forward_cost_curve, predicted_seconds_per_image
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


def markdown(rows: list[Row]) -> str:
    head = ("| method | window | lossless | NFE/image | step compression | latency speedup | "
            "1-token iterations | overhead share |\n|---|---|---|---|---|---|---|---|\n")
    body = "".join(
        f"| {r.method} | {'auto: ' if r.auto else ''}{r.window} | {'yes' if r.lossless else 'no'} | {r.nfe:.1f} | "
        f"{r.step_compression:.2f}x | {r.latency_speedup:.2f}x | {100 * r.single_token_share:.0f}% | "
        f"{100 * r.overhead_share:.0f}% |\n" for r in rows)
    return head + body


def write_report(rows: list[Row], extra: dict, out_dir: Path, meta: dict) -> None:
    from .plots import plot_bench

    out_dir.mkdir(parents=True, exist_ok=True)
    data = {**meta, **extra, "rows": [r.as_dict() for r in rows]}
    (out_dir / "bench.json").write_text(json.dumps(data, indent=2))
    (out_dir / "bench.md").write_text(markdown(rows))
    plot_bench(rows, extra.get("cost_curve"), out_dir)
