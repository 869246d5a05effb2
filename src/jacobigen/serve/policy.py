"""Which (method, window) decodes a request that did not pin one, given the load.

Jacobi decoding trades compute for latency: a long window takes fewer forwards per image, each
wider. The batch shares each forward, so with one image in flight the spare compute is free and a
lone request gets the longest window; as the batch fills, the forward's rows are rows of other
images, and every extra node a row evaluates delays them all, so the window narrows fast, keeping
the tokens per forward about constant (32 at one image, 16 x 2 at two), down to plain ``ar`` (one
token per forward) from a quarter of the batch on. The rungs are (method, window) pairs, widest
first; the load is the images in flight plus those waiting, as a share of the batch's rows.

Whether a wide forward is nearly free depends on the machine: on an accelerator it is, on a small CPU
it is not (the embedded model on 2 cores makes an image faster with ``ar`` than with window 32, see
benchmarks/serve/bench.md). :meth:`WindowPolicy.calibrated` keeps only the rungs that make one image
faster than every narrower rung, from the machine's calibration (:func:`measured_seconds`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction

from ..core.sampling import SamplingConfig
from .fields import Group

# the best lossless method on the embedded model (README, "Results on the embedded model")
BEST = "scd-mc"
RUNGS = ((BEST, 32), (BEST, 16), ("ar", 1))
# Model-row tokens one step may evaluate (rows x block, a guided image counting two rows): a step is
# what a cancelled request waits for before its rows are freed. The embedded model on 2 loaded cores
# (float32, 1 thread) took 0.30 s for 2 x 256 tokens, 1.53 s for 2 x 1024 and 14.9 s for 2 x 4368.
STEP_TOKENS = 1024


@dataclass(frozen=True)
class WindowPolicy:
    """``rungs[i]`` serves loads up to ``bounds[i]`` of the batch (the last: any load)."""

    max_batch: int
    rungs: tuple[tuple[str, int], ...] = RUNGS
    bounds: tuple[float, ...] = (0.125, 0.25)
    step_tokens: int = STEP_TOKENS

    def batch_for(self, tokens: int) -> int:
        """Images one step may hold when each evaluates ``tokens`` model-row tokens: at most
        ``max_batch``, and no more than keep the step within ``step_tokens`` (0: not even one)."""
        return min(self.max_batch, self.step_tokens // tokens)

    def rung(self, load: int) -> int:
        share = load / self.max_batch
        return next((i for i, b in enumerate(self.bounds) if share <= b), len(self.rungs) - 1)

    def group(self, load: int, sampling: SamplingConfig) -> Group:
        method, window = self.rungs[self.rung(load)]
        return Group(method, window, sampling)

    def fits(self, running: Group, load: int, sampling: SamplingConfig) -> bool:
        """Whether a request the policy decides may join ``running`` at this load: it is the rung of a
        load within ``max_batch / 8`` images (at least one) of this one (a little hysteresis, so that a
        load that hovers at a bound does not drain the batch at every arrival)."""
        slack = max(1, self.max_batch // 8)
        near = {self.rungs[self.rung(max(1, n))] for n in range(load - slack, load + slack + 1)}
        return running.sampling == sampling and (running.method, running.window) in near

    def describe(self) -> str:
        """The ladder in words: "scd-mc/32 up to 1/8 of the batch's 8 rows, scd-mc/16 up to 1/4, ar beyond"."""
        shares = [str(Fraction(b).limit_denominator(64)) for b in self.bounds]
        steps = [f"{m}/{w} up to {share}" for (m, w), share in zip(self.rungs[:-1], shares, strict=True)]
        if steps:
            steps[0] += f" of the batch's {self.max_batch} rows"
        method, window = self.rungs[-1]
        last = method if method == "ar" else f"{method}/{window}"
        return ", ".join([*steps, f"{last} {'beyond' if steps else 'at any load'}"])

    def calibrated(self, seconds: Callable[[str, int], float]) -> WindowPolicy:
        """The rungs that earn their place: a rung stays when one image alone takes less time with it
        (``seconds(method, window)``) than with every narrower rung kept; the narrowest always stays."""
        kept: list[int] = []
        best = math.inf
        for i in reversed(range(len(self.rungs))):
            took = seconds(*self.rungs[i])
            if took < best:
                kept.append(i)
                best = took
        kept.reverse()
        return replace(self, rungs=tuple(self.rungs[i] for i in kept), bounds=tuple(self.bounds[i] for i in kept[:-1]))


def measured_seconds(bundle) -> Callable[[str, int], float]:
    """``seconds(method, window)``: one image's predicted seconds on this machine, from the calibration
    ``--method auto`` keeps (:func:`jacobigen.tools.auto.choose`: measured once per model, device,
    threads and sampling, then read from the cache)."""
    from ..tools.auto import cache_file, choose, label

    predicted: dict[str, float] = {}
    for method in dict.fromkeys(m for m, _ in RUNGS if m != "ar"):
        predicted.update(choose(bundle, method, None, cache_file()).predicted)
    return lambda method, window: predicted[label(method, window)]
