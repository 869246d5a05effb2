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

from .methods import get_method
from .pipeline import Pipeline


@dataclass
class Row:
    method: str
    window: int
    lossless: bool
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


def run_bench(pipe: Pipeline, methods: list[str], windows: list[int], prompts: list[str],
              seeds: list[int], progress: bool = True, **sampling) -> list[Row]:
    """Run every (method, window) on every (prompt, seed), interleaved so drift hits all alike."""
    specs = [get_method(m) for m in dict.fromkeys(["ar", *methods])]
    configs = [(s, s.window or w) for s in specs for w in ([1] if s.window else windows)]
    rows = {(s.name, w): Row(s.name, w, s.lossless) for s, w in configs}
    jobs = [(p, seed, s, w) for p in prompts for seed in seeds for s, w in configs]
    for prompt, seed, spec, w in tqdm(jobs, disable=not progress, desc="bench", unit="run"):
        gen, _ = pipe.generate(prompt, method=spec.name, window=w, seed=seed, **sampling)
        rows[spec.name, w].add(gen.stats)
    ar = rows["ar", 1]
    for r in rows.values():
        r.step_compression = ar.nfe / r.nfe
        r.latency_speedup = ar.wall / r.wall
    return list(rows.values())


def markdown(rows: list[Row]) -> str:
    head = ("| method | window | lossless | NFE/image | step compression | latency speedup | "
            "1-token iterations | overhead share |\n|---|---|---|---|---|---|---|---|\n")
    body = "".join(
        f"| {r.method} | {r.window} | {'yes' if r.lossless else 'no'} | {r.nfe:.1f} | "
        f"{r.step_compression:.2f}x | {r.latency_speedup:.2f}x | {100 * r.single_token_share:.0f}% | "
        f"{100 * r.overhead_share:.0f}% |\n" for r in rows)
    return head + body


def write_report(rows: list[Row], out_dir: Path, meta: dict) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench.json").write_text(json.dumps({**meta, "rows": [r.as_dict() for r in rows]}, indent=2))
    (out_dir / "bench.md").write_text(markdown(rows))
