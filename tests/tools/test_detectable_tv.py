"""The exactness tests' power: the bias detectable_tv names is rejected as often as it says, by the
same G-test on simulated counts, and no bias of that size hides better than the one it assumes."""

import numpy as np
import pytest
from scipy import stats

from jacobigen.tools.exactness import detectable_tv, pooled

N, ALPHA, TRIALS = 20_000, 1e-4, 2000


def rejected(q: np.ndarray, p: np.ndarray, seed: int = 0) -> float:
    """How often the G-test at ALPHA rejects p for N samples drawn from q."""
    counts = np.random.default_rng(seed).multinomial(N, q, size=TRIALS)
    expected = p * N
    obs = np.array([pooled(c, expected)[0] for c in counts])
    exp = pooled(np.zeros_like(expected), expected)[1]
    g = 2 * np.sum(np.where(obs > 0, obs * np.log(np.maximum(obs, 1) / exp), 0.0), axis=1)
    return float(np.mean(g > stats.chi2.isf(ALPHA, len(exp) - 1)))


def hardest(p: np.ndarray, tv: float) -> np.ndarray:
    """The bias of a given TV with the least chi-square: p scaled up on half the mass, down on the other."""
    return p * np.where(np.arange(len(p)) % 2 == 0, 1 + 2 * tv, 1 - 2 * tv)


@pytest.mark.parametrize("power", [0.5, 0.9])
def test_the_hardest_bias_of_that_size_is_rejected_as_often_as_promised(power):
    p = np.full(100, 0.01)
    tv = detectable_tv(100, N, ALPHA, power)
    assert abs(0.5 * np.abs(hardest(p, tv) - p).sum() - tv) < 1e-12
    assert abs(rejected(hardest(p, tv), p) - power) < 0.04
    assert rejected(hardest(p, tv / 2), p) < 0.1  # half the bias mostly passes


def test_other_shapes_of_that_size_are_rejected_at_least_as_often():
    """All the bias on two cells, on a peaked reference that pools its tail as the tests do."""
    p = np.sort(np.random.default_rng(1).dirichlet(np.full(200, 0.5)))[::-1]
    cells = len(pooled(np.zeros_like(p), p * N)[1])
    tv = detectable_tv(cells, N, ALPHA)
    q = p.copy()
    q[0] += tv
    q[1] -= tv
    assert rejected(q, p) > 0.9


def test_more_cells_or_fewer_samples_hide_a_larger_bias():
    assert detectable_tv(12, N) < detectable_tv(175, N) < detectable_tv(175, N // 4)
    assert detectable_tv(175, 4 * N) == pytest.approx(detectable_tv(175, N) / 2)
