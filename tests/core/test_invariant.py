"""Row-invariant linear layers (issue 49): the probe finds this machine's plan, rows under it do not
depend on their count or place, and a kernel that rounds by row count gets no plan (so the engine
falls back to per-sequence forwards, with a warning)."""

import pytest
import torch
import torch.nn.functional as F

from jacobigen import generate
from jacobigen.core import invariant
from jacobigen.core.invariant import Plan, install, plan, row_invariant_kernels
from tests.helpers.models import LAYOUT, PROMPT, random_model


@pytest.fixture(autouse=True)
def fresh_plans(monkeypatch):
    monkeypatch.setattr(invariant, "_plans", {})


def test_a_plan_keeps_every_row_whatever_its_batch():
    w = torch.randn(300, 96, generator=torch.Generator().manual_seed(1))
    x = torch.randn(140, 96, generator=torch.Generator().manual_seed(2))
    p = plan(w)
    assert p is not None
    whole = p(x, w, None)
    for m, at in ((1, 0), (2, 7), (3, 1), (5, 40), (33, 3), (100, 11)):
        assert torch.equal(p(x[at : at + m], w, None), whole[at : at + m]), (p, m, at)


@pytest.mark.parametrize("p", [Plan(floor=4), Plan(chunk=8)])
def test_both_plans_give_the_plain_product_within_rounding(p):
    w, b = torch.randn(40, 24), torch.randn(40)
    x = torch.randn(2, 11, 24)
    out = p(x, w, b)
    assert out.shape == (2, 11, 40)
    torch.testing.assert_close(out, F.linear(x, w, b))


def test_a_kernel_that_rounds_by_row_count_runs_in_fixed_chunks(monkeypatch):
    real = F.linear

    def by_rows(x, w, b=None):
        return real(x, w * (1 + 1e-5 * x.shape[0]), b)

    monkeypatch.setattr(invariant.F, "linear", by_rows)
    w, x = torch.randn(64, 32), torch.randn(50, 32)
    p = plan(w)
    assert p == Plan(chunk=invariant.CHUNK)
    assert torch.equal(p(x[3:5], w, None), p(x, w, None)[3:5])


def test_a_kernel_that_rounds_a_row_by_its_place_has_no_plan(monkeypatch):
    real = F.linear

    def by_place(x, w, b=None):
        return real(x, w, b) * (1 + 1e-5 * torch.arange(x.shape[0]))[:, None]

    monkeypatch.setattr(invariant.F, "linear", by_place)
    assert plan(torch.randn(64, 32)) is None


def test_without_a_plan_deterministic_falls_back_to_per_sequence_forwards(monkeypatch):
    monkeypatch.setattr(invariant, "plan", lambda w: None)
    model = random_model()
    with pytest.warns(UserWarning, match="each sequence runs its own forward"):
        gen = generate(model, [PROMPT, PROMPT[:2]], layout=LAYOUT, method="ar", seed=[1, 2], deterministic=True)
    alone = generate(model, PROMPT[:2], layout=LAYOUT, method="ar", seed=[2], deterministic="per-sequence")
    assert torch.equal(gen.tokens[1], alone.tokens[0])


def test_an_installed_layer_follows_its_plan_only_inside_the_kernels(monkeypatch):
    layer = torch.nn.Linear(16, 8)
    model = torch.nn.Sequential(layer)
    x = torch.randn(3, 16)
    seen = []

    class Seen(Plan):
        def __call__(self, input, weight, bias):
            seen.append(input.shape[0])
            return super().__call__(input, weight, bias)

    monkeypatch.setattr(invariant, "plan", lambda w: Seen(floor=4))
    assert install(model) and install(model)  # idempotent
    plain = model(x)
    assert seen == []
    with row_invariant_kernels():
        inside = model(x)
    assert seen == [3]
    torch.testing.assert_close(inside, plain)
    monkeypatch.setattr(invariant, "plan", lambda w: None)
    assert not install(model)
    with pytest.raises(RuntimeError, match="deterministic='per-sequence'"), row_invariant_kernels():
        model(x)
