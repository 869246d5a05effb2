"""Counter-based randomness: uniform, key-sensitive, and never picks a zero-probability id."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from jacobigen.core import rng
from jacobigen.core.draws import Draws


def test_uniforms_are_uniform_and_key_sensitive():
    u = rng.uniform(rng.Stream.ACCEPT, 7, torch.arange(200_000), 3)
    assert 0 < float(u.min()) and float(u.max()) < 1
    assert sps.kstest(u.numpy(), "uniform").pvalue > 1e-3
    v = rng.uniform(rng.Stream.SAMPLE, 7, torch.arange(200_000), 3)
    assert abs(float(torch.corrcoef(torch.stack([u, v]))[0, 1])) < 0.01
    assert torch.equal(u, rng.uniform(rng.Stream.ACCEPT, 7, torch.arange(200_000), 3))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from([0.0, 0.0, 1e-12, 0.3, 1.0, 5.0]), min_size=1, max_size=12),
    st.floats(min_value=1e-12, max_value=1 - 1e-12),
)
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


def test_hash_matches_python_integers():
    """The int64 evaluation (wrapping products) equals the 32-bit hash computed exactly."""

    def mix(x):
        x ^= x >> 16
        x = x * 0x7FEB352D & 0xFFFFFFFF
        x ^= x >> 15
        x = x * 0x846CA68B & 0xFFFFFFFF
        return x ^ (x >> 16)

    def reference(*keys):
        h = 0x9E3779B9
        for k in keys:
            h = mix((h ^ (k & 0xFFFFFFFF)) + 0x632BE5AB & 0xFFFFFFFF)
        return h

    keys = [(0, 0, 0), (2**32 - 1, 7, 3), (123456789, 2**31 + 5, 9), (-5, 40, 2)]
    for k in keys:
        assert int(rng.hash_keys(*(torch.tensor(x) for x in k))) == reference(*k)


def test_small_and_large_paths_agree(monkeypatch):
    """Small CPU key sets hash in NumPy, large ones in torch: the values must be the same."""
    keys = (torch.tensor([3, 2**33 + 7, -4])[:, None], torch.arange(40)[None] + 10, torch.tensor([5, 6, 7])[:, None], 2)
    small = rng.uniform(rng.Stream.ACCEPT, *keys)
    one = rng.uniform(rng.Stream.ACCEPT, torch.tensor([[-4]]), torch.tensor([[17]]), torch.tensor([[7]]), 2)
    monkeypatch.setattr(rng, "_SMALL", 0)
    big = rng.uniform(rng.Stream.ACCEPT, *keys)
    assert small.dtype == big.dtype == one.dtype == torch.float64 and small.shape == (3, 40)
    assert torch.equal(small, big) and one.shape == (1, 1) and one[0, 0] == big[2, 7]


def test_streams_arities_and_kinds_never_share_a_uniform():
    """Every kind of draw the decoders make, enumerated over (position, iteration, token) in
    [0, 10) for every stream: with and without an extra key, as a uniform and behind Gumbel noise.
    No two differently keyed draws share a uniform (the hash once reused the ACCEPT uniform of
    iteration 5 as the shared Gumbel noise of token 1)."""
    n, seed = 10, 11
    pos, it, tok = torch.arange(n)[:, None, None], torch.arange(n)[None, :, None], torch.arange(n)[None, None, :]

    def behind_gumbel(s, *keys):
        u = rng._unit(rng._domain(s, keys, rng._GUMBEL))
        assert torch.equal(-torch.log(-torch.log(u)), rng.gumbel(s, *keys))
        return u

    values = []
    for s in [v for k, v in vars(rng.Stream).items() if k.isupper()]:
        values += [
            rng.uniform(s, seed, pos[..., 0], it[..., 0]),
            rng.uniform(s, seed, pos, it, tok),
            behind_gumbel(s, seed, pos, it, tok),
            behind_gumbel(s, seed, pos[..., 0], tok[0]),
        ]
    values = torch.cat([v.flatten() for v in values])
    assert values.numel() > 13_000
    _, counts = torch.unique(values, return_counts=True)
    assert int(counts.max()) == 1, f"{int((counts > 1).sum())} uniforms shared between draws"


def test_draws_over_tables_that_start_past_id_zero_are_those_of_tables_from_zero():
    """Tables over the id span [lo, hi): column i is id lo + i. A draw returns the model's id and
    noise is keyed by the id, so a decode's tokens do not depend on where its tables start."""
    seeds, iteration, pos = torch.tensor([3, 9]), torch.tensor([1, 4]), torch.tensor([[0, 5], [2, 7]])
    whole, span = Draws(seeds, iteration), Draws(seeds, iteration, lo=3)
    assert torch.equal(span.gumbel(pos, 5, rng.Stream.TREE), whole.gumbel(pos, 8, rng.Stream.TREE)[..., 3:])
    columns = torch.tensor([[[0, 4]], [[1, 2]]]).expand(2, 2, 2)
    assert torch.equal(span.shared_gumbel(pos, columns), whole.shared_gumbel(pos, columns + 3))
    p = torch.rand(2, 2, 8, generator=torch.Generator().manual_seed(0)) * (torch.arange(8) >= 3)
    assert torch.equal(span.sample(p[..., 3:], pos, rng.Stream.DRAFT), whole.sample(p, pos, rng.Stream.DRAFT))
    assert span.local(torch.tensor([-1, 3, 7])).tolist() == [0, 0, 4]
    assert span.repeat(2).lo == 3
