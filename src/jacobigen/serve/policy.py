"""Which (method, window) decodes a request that did not pin one, given the load.

Jacobi decoding trades compute for latency: a long window takes fewer forwards per image, each
wider. With one image in flight the spare compute is free, so a lone request gets the longest
window; as the batch fills, every extra node a row evaluates delays the other rows, so the window
narrows, down to plain ``ar`` (one token per forward) when the batch is full. The rungs are
(method, window) pairs, widest first; the load is the images in flight plus those waiting, as a
share of the batch's rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.sampling import SamplingConfig
from .fields import Group

# the best lossless method on the embedded model (README, "Results on the embedded model")
BEST = "scd-mc"
RUNGS = ((BEST, 32), (BEST, 16), ("ar", 1))


@dataclass(frozen=True)
class WindowPolicy:
    """``rungs[i]`` serves loads up to ``bounds[i]`` of the batch (the last: any load)."""

    max_batch: int
    rungs: tuple[tuple[str, int], ...] = RUNGS
    bounds: tuple[float, ...] = (0.25, 0.5)

    def rung(self, load: int) -> int:
        share = load / self.max_batch
        return next((i for i, b in enumerate(self.bounds) if share <= b), len(self.rungs) - 1)

    def group(self, load: int, sampling: SamplingConfig) -> Group:
        method, window = self.rungs[self.rung(load)]
        return Group(method, window, sampling)

    def fits(self, running: Group, load: int, sampling: SamplingConfig) -> bool:
        """Whether a request the policy decides may join ``running`` at this load: it is a rung within
        one of the load's (a little hysteresis, so that a load that hovers at a bound does not drain
        the batch at every arrival)."""
        here = self.rung(load)
        near = {self.rungs[i] for i in (here - 1, here, here + 1) if 0 <= i < len(self.rungs)}
        return running.sampling == sampling and (running.method, running.window) in near
