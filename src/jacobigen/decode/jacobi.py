"""The Jacobi decoder: a method's parts, a schedule, the one step and the batch scheduler.

Plain AR is the chain with window 1 (no drafts); PJD is the row-parallel schedule; every other
method is the chain with its drafter, tree and verifier (docs/DESIGN.md §3-§4).
"""

from __future__ import annotations

from dataclasses import dataclass

from tqdm.auto import tqdm

from ..core.contract import check_layout, check_model
from ..core.errors import ConfigError
from ..core.layout import ImageLayout
from ..core.sampling import SamplingConfig, TargetPipeline
from ..parts.drafters import Drafter
from ..parts.tree import ProactiveTree
from ..parts.verifiers import Verifier
from .batching import decode
from .chain import Chain
from .engine import Determinism, Engine
from .pjd import RowParallel, Rows


@dataclass(frozen=True)
class Parts:
    drafter: Drafter
    verifier: Verifier
    window: int
    tree: ProactiveTree | None = None
    schedule: RowParallel | None = None  # a part that brings its own schedule (PJD's rows), None: the 1-D chain


class JacobiDecoder:
    """Decodes sequences of one layout with one method's parts; each advances by its own accepted
    length. ``timing=True`` syncs an accelerator around each forward so that the forward time in
    the stats is real (on a CPU it always is). ``compile`` runs the step as one compiled graph,
    and otherwise ``cuda_graphs`` replays each forward as a CUDA graph on CUDA (:mod:`.capture`)."""

    def __init__(
        self,
        model,
        layout: ImageLayout,
        sampling: SamplingConfig,
        parts: Parts,
        timing: bool = False,
        latents=None,
        compile: bool | str = False,
        deterministic: Determinism = False,
        cuda_graphs: bool = True,
    ):
        if parts.window < 1:
            raise ConfigError(f"window must be >= 1, got {parts.window}")
        device = check_model(model)
        check_layout(model, layout)
        targets = TargetPipeline(sampling, layout, model.vocab_size, device)
        schedule: Chain | Rows
        if parts.schedule is not None:
            schedule = parts.schedule.build(layout, parts.window, parts.tree, targets, device)
        else:
            schedule = Chain(layout, parts.window, parts.tree, targets, device)
        parts.verifier.bind(model, layout, latents)  # relaxed verifiers look up their neighbours once
        self.engine = Engine(
            model, layout, sampling, parts, schedule, targets, timing, compile, deterministic, cuda_graphs
        )

    def run(self, prefixes: list[list[int]], seeds: list[int], progress: bool = False, batch_size: int | None = None):
        """prefixes: one token list per model row (cond, uncond interleaved when guided);
        seeds: one per sequence. At most ``batch_size`` sequences (default: all) are in flight;
        a finished sequence's row takes the next prompt (continuous refill).
        Returns (tokens [N, length], DecodeStats)."""
        length = self.engine.layout.length
        with tqdm(total=len(seeds) * length, disable=not progress, unit="tok", desc="decoding") as bar:
            tokens, stats = decode(self.engine, prefixes, seeds, batch_size, bar.update if progress else None)
        stats.forward_path = self.engine.forward_path
        return tokens, stats
