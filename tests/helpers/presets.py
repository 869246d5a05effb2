"""The presets a slow check runs: enough that every pair of parts some preset combines runs together.

A check that every preset passes (replayed step, batch invariance, one compiled graph, the command
line on a family) fails on a part, or on how two parts meet; a preset of three parts exercises three
such meetings at once. So instead of every preset, the slow tier runs a greedy cover of the pairs,
computed from the registry: a new preset whose parts meet in a new way joins the cover by itself.
Each preset's own exactness test still runs on every preset (tests/decode/test_exactness.py).
"""

from __future__ import annotations

import itertools

from jacobigen import METHODS


def part_pairs(name: str) -> set[frozenset]:
    """The parts preset ``name`` runs and the pairs of them it combines (a part with its fixed
    defaults is its own)."""
    parts = sorted({(p.name, tuple(sorted(p.defaults.items()))) for p in METHODS[name].parts})
    return {frozenset(c) for k in (1, 2) for c in itertools.combinations(parts, k)}


def covering(names: list[str]) -> list[str]:
    """A few of ``names`` that together run every part and combine every pair of parts any of them
    does, in ``names``' order: greedily the preset that adds the most pairs not yet run (ties: the first)."""
    pairs = {n: part_pairs(n) for n in names}
    left = set().union(*pairs.values())
    chosen: set[str] = set()
    while left:
        best = max(names, key=lambda n: len(pairs[n] & left))
        chosen.add(best)
        left -= pairs[best]
    return [n for n in names if n in chosen]
