"""Counter-based randomness: uniform, key-sensitive, and never picks a zero-probability id."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from jacobigen import rng


def test_uniforms_are_uniform_and_key_sensitive():
    u = rng.uniform(7, torch.arange(200_000), 3, rng.Stream.ACCEPT)
    assert 0 < float(u.min()) and float(u.max()) < 1
    assert sps.kstest(u.numpy(), "uniform").pvalue > 1e-3
    v = rng.uniform(7, torch.arange(200_000), 3, rng.Stream.SAMPLE)
    assert abs(float(torch.corrcoef(torch.stack([u, v]))[0, 1])) < 0.01
    assert torch.equal(u, rng.uniform(7, torch.arange(200_000), 3, rng.Stream.ACCEPT))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.0, 1e-12, 0.3, 1.0, 5.0]), min_size=1, max_size=12),
       st.floats(min_value=1e-12, max_value=1 - 1e-12))
def test_categorical_stays_in_support(weights, u):
    p = torch.tensor(weights)
    if p.sum() == 0:
        p[0] = 1.0
    i = int(rng.categorical(p / p.sum(), torch.tensor(u, dtype=torch.float64)))
    assert p[i] > 0


def test_categorical_matches_probabilities():
    p = torch.tensor([0.1, 0.0, 0.6, 0.3])
    draws = rng.categorical(p.expand(100_000, -1), rng.uniform(1, torch.arange(100_000)))
    counts = torch.bincount(draws, minlength=4).numpy()
    assert counts[1] == 0
    expected = 100_000 * p[[0, 2, 3]].double().numpy()
    assert sps.chisquare(counts[[0, 2, 3]], expected / expected.sum() * 100_000).pvalue > 1e-4
