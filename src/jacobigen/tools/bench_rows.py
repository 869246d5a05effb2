"""What the bench measures, as data: a row per (method, window) and a run per image. Torch-free,
so that the reports can be rendered again from a committed bench.json (docs/gen_results.py)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

PLAIN = "plain-ar"
# the plain loop on the float32 model, beside a decode in another dtype of weights that ship in float32
# (the embedded models): the loop a user writes without thinking of dtypes, and on a CPU the faster one
PLAIN32 = "plain-ar-float32"
SHARED, DETERMINISTIC, PER_SEQUENCE = "shared", "deterministic", "per-sequence"  # how a batch runs its forward
BASELINES = ("ar", PLAIN, PLAIN32)


@dataclass
class Row:
    method: str
    window: int
    lossless: bool
    auto: bool = False  # window chosen from the device's cost curve
    runs: int = 0
    nfe: float = 0.0  # forward passes per image (mean)
    wall: float = 0.0  # wall seconds per image (mean, perf_counter around the call)
    cpu: float = 0.0  # CPU seconds per image, all threads (mean, process_time around the call)
    forward: float | None = 0.0  # seconds in the model forward per image (None: not measured)
    histogram: dict = field(default_factory=dict)
    nodes: float = 0.0  # block nodes per iteration (mean)
    sibling_tokens: float = 0.0  # tokens per image committed from off-spine tree nodes (mean)
    step_compression: float = 0.0
    latency_speedup: float = 0.0  # wall time, against the faster baseline
    cpu_speedup: float = 0.0  # CPU time, against the baseline with less CPU time
    latency_speedup_vs_ar: float = 0.0  # wall time, against ar
    fid_vs_ar: float | None = None  # against ar's images on other seeds (ar's own row: the noise)
    fid_vs_data: float | None = None  # against the model's held-out images
    acceptance: list | None = None  # the first image's acceptance map: iteration of each token [rows][frames * cols]
    # a compiled step (--compile): graphs its first image compiled, graphs compiled after it (0 when
    # every later image reuses them), graph breaks, and whether its first image's tokens equal eager's
    graphs: int | None = None
    recompiles: int | None = None
    graph_breaks: int | None = None
    tokens_equal_eager: bool | None = None
    compile_error: str | None = None  # why this row's step did not compile (the row is then not timed)

    @property
    def baseline(self) -> bool:
        return self.method in BASELINES

    @property
    def single_token_share(self) -> float:
        total = sum(self.histogram.values())
        return self.histogram.get(1, 0) / total if total else 0.0

    @property
    def tokens_per_iteration(self) -> float:
        total = sum(self.histogram.values())
        return sum(k * v for k, v in self.histogram.items()) / total if total else 0.0

    @property
    def tokens_per_node(self) -> float:
        """Committed tokens per evaluated block node."""
        return self.tokens_per_iteration / self.nodes if self.nodes else 0.0

    @property
    def overhead_share(self) -> float | None:
        return None if self.forward is None or not self.wall else 1 - self.forward / self.wall

    @property
    def bookkeeping_ms(self) -> float | None:
        """Milliseconds per iteration outside the model forward (drafting, verification, commit,
        the batch's upkeep): what the step costs around the forward."""
        return None if self.forward is None or not self.nfe else (self.wall - self.forward) / self.nfe * 1e3

    def add(self, run: Run) -> None:
        n = self.runs

        def mean(old, new):
            return (old * n + new) / (n + 1)

        self.nfe, self.wall, self.cpu = mean(self.nfe, run.nfe), mean(self.wall, run.wall), mean(self.cpu, run.cpu)
        self.nodes, self.sibling_tokens = mean(self.nodes, run.nodes), mean(self.sibling_tokens, run.sibling_tokens)
        self.forward = None if run.forward is None or self.forward is None else mean(self.forward, run.forward)
        for k, v in run.histogram.items():
            self.histogram[k] = self.histogram.get(k, 0) + v
        if self.acceptance is None and run.acceptance is not None:
            self.acceptance = run.acceptance
        self.runs = n + 1

    @classmethod
    def from_dict(cls, data: dict) -> Row:
        """A row from its ``as_dict`` form (a committed bench.json): its fields, the derived figures
        recomputed from them."""
        row = cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})
        row.histogram = {int(k): v for k, v in row.histogram.items()}  # JSON keys are strings
        return row

    def as_dict(self) -> dict:
        return {
            **asdict(self),
            "single_token_share": self.single_token_share,
            "overhead_share": self.overhead_share,
            "bookkeeping_ms": self.bookkeeping_ms,
            "tokens_per_iteration": self.tokens_per_iteration,
            "tokens_per_node": self.tokens_per_node,
        }


@dataclass
class Run:
    """One image's decode: forward passes, wall and CPU seconds, forward seconds, histogram, block
    nodes per iteration and tokens committed from off-spine tree nodes."""

    nfe: int
    wall: float
    cpu: float
    forward: float | None
    histogram: dict
    nodes: float
    sibling_tokens: int
    acceptance: list | None = None  # iteration that committed each token [rows][frames * cols]
    tokens: torch.Tensor | None = field(default=None, repr=False)  # the generated tokens
