"""Property tests of the parts on random distributions with zeros, ties, one-hot and near-one-hot
rows: outputs stay in the support, nothing is NaN, residuals are never empty."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from jacobigen.core.draws import Draws
from jacobigen.core.mrs import residual
from jacobigen.parts.drafters import Coupled, GumbelShared, Independent, Slots, VerificationPrior
from jacobigen.parts.tree import ProactiveTree
from jacobigen.parts.verifiers import Verifier, Window, without

WEIGHTS = st.sampled_from([0.0, 0.0, 0.0, 1e-30, 1e-7, 0.25, 1.0, 1.0, 4.0])


@st.composite
def dists(draw, rows, vocab):
    out = []
    for _ in range(rows):
        w = torch.tensor(draw(st.lists(WEIGHTS, min_size=vocab, max_size=vocab)), dtype=torch.float32)
        if w.sum() == 0:
            w[draw(st.integers(0, vocab - 1))] = 1.0
        out.append(w / w.sum())
    return torch.stack(out)


@st.composite
def cases(draw):
    b, w, v = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(2, 6))
    p = draw(dists(b * (w + 1), v)).view(b, w + 1, v)
    q = draw(dists(b * w, v)).view(b, w, v)
    seed = draw(st.integers(0, 2**31 - 1))
    return p, q, seed


def draws_for(b, seed):
    return Draws(torch.full((b,), seed), torch.ones(b, dtype=torch.int64))


def support(p, idx):
    return bool((p.gather(-1, idx[..., None]) > 0).all())


@settings(max_examples=150, deadline=None)
@given(cases())
def test_verifier_commits_only_supported_tokens(case):
    p, q, seed = case
    b, w, v = q.shape
    draws = draws_for(b, seed)
    pos = torch.arange(w)[None].expand(b, -1)
    d = draws.sample(q, pos, 9)
    window = Window(d, q, torch.zeros(b, 0, 1, dtype=torch.int64), torch.zeros(b, 0, 1, dtype=torch.bool))
    k, x, path = Verifier().verify(p, window, torch.full((b,), w), torch.arange(w + 1)[None].expand(b, -1), draws)
    assert ((0 <= k) & (k <= w)).all()
    for i in range(b):
        ki = int(k[i])
        assert support(p[i, :ki], d[i, :ki]) and float(p[i, ki, x[i]]) > 0
        assert path[i, : ki + 1].tolist() == list(range(ki + 1))


@settings(max_examples=150, deadline=None)
@given(cases())
def test_residual_is_a_distribution_inside_p(case):
    p, q, _ = case
    r = residual(p[:, :-1], q)
    assert not r.isnan().any()
    torch.testing.assert_close(r.sum(-1), torch.ones(r.shape[:-1]))
    assert ((r > 0) <= (p[:, :-1] > 0)).all()


@settings(max_examples=100, deadline=None)
@given(cases(), st.sampled_from(["independent", "mc", "gs", "vp"]))
def test_drafters_stay_in_belief_support(case, kind):
    p, q, seed = case
    b, w, v = q.shape
    draws = draws_for(b, seed)
    pos = torch.arange(w)[None].expand(b, -1) + 3
    old = draws.sample(q, pos, 9)
    drafter = {
        "independent": Independent(),
        "mc": Coupled(),
        "gs": GumbelShared(),
        "vp": VerificationPrior(Coupled(), history=2, growth_steps=1, weight=5.0),
    }[kind]
    drafter.start(b, w, v, "cpu")
    belief = p[:, :w]
    for _ in range(3):  # VP needs history before it fuses
        tokens, q_new = drafter.draft(
            Slots(pos, belief, torch.ones(b, w, dtype=torch.bool), old, q, torch.ones(b, w, dtype=torch.bool)), draws
        )
        assert not q_new.isnan().any()
        torch.testing.assert_close(q_new.sum(-1), torch.ones(b, w))
        assert support(q_new, tokens) and support(belief, tokens)
        belief = torch.roll(belief, 1, -1) * 0.5 + belief * 0.5


@settings(max_examples=100, deadline=None)
@given(cases(), st.integers(2, 5))
def test_tree_candidates_distinct_and_supported(case, width):
    p, q, seed = case
    b, w, v = q.shape
    draws = draws_for(b, seed)
    pos = torch.arange(w)[None].expand(b, -1)
    first = draws.sample(q, pos, 9)
    cand, valid = ProactiveTree(w + 1, width).expand(first, q, pos, draws)
    assert torch.equal(cand[..., 0], first)
    for i in range(b):
        for t in range(w):
            ids = cand[i, t][valid[i, t]]
            assert len(set(ids.tolist())) == len(ids)
            assert (q[i, t, ids] > 0).all()
            assert int(valid[i, t].sum()) == min(width, int((q[i, t] > 0).sum()))


@settings(max_examples=100, deadline=None)
@given(cases())
def test_without_renormalises(case):
    _, q, _ = case
    flat = q.flatten(0, 1)
    ids = flat.argmax(-1)
    out = without(flat, ids)
    assert (out.gather(-1, ids[:, None]) == 0).all()
    mass = out.sum(-1)
    assert torch.all(((mass - 1).abs() < 1e-5) | (mass == 0))
