"""The prior for a model with no figure of its own: when ``auto`` tries a candidate it knows nothing about.

What a candidate costs here is measured in a second (:mod:`.costs`): one iteration costs a forward of its
block plus its bookkeeping, against ``ar``'s single-token forward plus its own. Their ratio is the
**break-even** step compression: a candidate pays only when it commits more tokens per iteration than
that. It is also the **worst case** against ``ar``: a Jacobi iteration commits at least one token, so at
worst an image takes as many iterations as ``ar`` takes forwards, each at the candidate's cost.

What a candidate saves is known only after decoding, so the prior takes a **conservative expected
compression**: the lowest measured at that window for a comparable layout (a table or learned figures, on any
weights with an image length within ``COMPARABLE`` times this one's), else a published figure, marked
as such. A candidate is explored when its expected gain over ``ar`` is at least ``EXPLORE_GAIN`` and its
worst case costs at most ``WORST_CASE`` times ``ar``'s time; the next choice uses what it measured.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import learned
from .steps import every_figure

WORST_CASE = 1.1  # a candidate explored at one token per iteration costs at most this times ar
EXPLORE_GAIN = 1.5  # and is expected to run at least this times as fast as ar
COMPARABLE = 2.0  # a layout within this factor of the image's length is comparable
PUBLISHED = 2.0
PUBLISHED_NOTE = "published: SJD (Teng et al., 2024) reports about 2x fewer forwards on Lumina-mGPT"


def expected_compression(length: int, window: int) -> tuple[float, str]:
    """(forwards of ``ar`` per forward of a window-``window`` candidate, where that figure comes from):
    the lowest measured at this window, by any lossless candidate under any sampling on any weights
    (this model's other candidates too) with a comparable image length; else the published figure."""
    known = every_figure()
    for key, n, figs in learned.everything():
        known.append((f"learned {key.split(' | ')[0]}", n, {name: f.nfe for name, f in figs.items()}))
    lowest: tuple[float, str] | None = None
    for where, n, steps in known:
        if not length / COMPARABLE <= n <= length * COMPARABLE:
            continue
        for name, nfe in steps.items():
            method, w = name.rsplit("@", 1)
            if method != "ar" and int(w) == window and (lowest is None or n / nfe < lowest[0]):
                lowest = (n / nfe, f"lowest measured at window {window} for a comparable layout ({where}, {n} tokens)")
    return lowest or (PUBLISHED, PUBLISHED_NOTE)


@dataclass(frozen=True)
class Verdict:
    """A candidate weighed by the prior: its break-even compression (= its worst case against ar), the
    gain the expected compression predicts, and whether that makes it worth a try."""

    break_even: float
    gain: float
    probed: bool = True  # False: its bookkeeping was not timed (its forward alone ruled it out), a bound

    @property
    def worst(self) -> float:
        """Its time against ar's at one token per iteration, over the whole image."""
        return self.break_even

    @property
    def explore(self) -> bool:
        return self.probed and self.gain >= EXPLORE_GAIN and self.worst <= WORST_CASE


def weigh(per_iteration: float, ar_per_forward: float, compression: float, probed: bool = True) -> Verdict:
    """A candidate costing ``per_iteration`` seconds an iteration (forward + bookkeeping) against ``ar``'s
    ``ar_per_forward``, expected to take ``compression`` times fewer forwards."""
    break_even = per_iteration / ar_per_forward
    return Verdict(break_even, compression / break_even, probed)
