"""The sampling pipeline: the lean implementation equals the textbook one, forced tokens included."""

import pytest
import torch

from jacobigen.core.layout import ImageLayout
from jacobigen.core.sampling import SamplingConfig, TargetPipeline

LAYOUT = ImageLayout(2, 3, (0, 6), eol_id=6, end_id=7)  # 9 generated positions, ids 0..9
SHIFTED = ImageLayout(2, 3, (2, 6), eol_id=6, end_id=7)  # image ids from 2: tables over ids 2..7


def reference(logits, s: SamplingConfig, layout, positions):
    """CFG -> mask -> temperature -> dense top-k mask -> softmax -> top-p -> one-hot forced."""
    x = logits.double()
    if s.guided:
        x = x[1::2] + s.cfg * (x[0::2] - x[1::2])
    x = x.masked_fill(~layout.allowed(x.shape[-1]), float("-inf")) / s.temperature
    if s.top_k:
        x = x.masked_fill(x < x.topk(s.top_k, -1).values[..., -1:], float("-inf"))
    p = x.softmax(-1)
    if s.top_p:
        sp, order = p.sort(-1, descending=True)
        drop = torch.zeros_like(p, dtype=torch.bool).scatter_(-1, order, sp.cumsum(-1) - sp >= s.top_p)
        p = p.masked_fill(drop, 0)
        p = p / p.sum(-1, keepdim=True)
    forced = torch.cat([layout.forced(), torch.tensor([-1])])[positions.clamp(max=layout.length)]
    onehot = torch.nn.functional.one_hot(forced.clamp(min=0), x.shape[-1]).double()
    return torch.where((forced >= 0)[..., None], onehot, p)


@pytest.mark.parametrize("layout,span", [(LAYOUT, (0, 8)), (SHIFTED, (2, 8))])
@pytest.mark.parametrize(
    "s",
    [
        SamplingConfig(),
        SamplingConfig(temperature=0.7, top_k=3),
        SamplingConfig(cfg=3.0, top_p=0.8),
        SamplingConfig(cfg=2.0, top_k=4, top_p=0.9),
    ],
)
def test_pipeline_matches_reference(s, layout, span):
    torch.manual_seed(0)
    positions = torch.tensor([[0, 2, 3, 4, 7, 8, 9, 12]])  # free, EOL, end, past the end
    logits = torch.randn(2 if s.guided else 1, positions.shape[1], 10) * 3
    pipe = TargetPipeline(s, layout, 10)
    (got, support), ref = pipe.with_support(logits, positions), reference(logits, s, layout, positions)
    # the tables cover the layout's id span (ids 0..7 or 2..7 of 10), column i being id lo + i:
    # the reference has no mass outside it
    lo, hi = span
    assert pipe.span == span and got.shape[-1] == pipe.width == hi - lo
    assert ref[..., :lo].abs().sum() == 0 and ref[..., hi:].abs().sum() == 0
    assert torch.allclose(got.double(), ref[..., lo:hi], atol=1e-6)
    if support is not None:  # columns, outside which p is zero
        assert got.scatter(-1, support, 0.0).abs().sum() == 0


def test_forced_tokens_survive_masked_logits():
    """A family may give structural ids -inf logits (and CFG turns -inf - -inf into NaN): forced
    positions are still one-hot and free ones still a distribution over the image ids."""
    logits = torch.randn(2, 4, 10)
    logits[..., 6:] = float("-inf")
    p = TargetPipeline(SamplingConfig(cfg=3.0), LAYOUT, 10)(logits, torch.tensor([[0, 3, 8, 9]]))
    assert torch.equal(p[0, 1], torch.nn.functional.one_hot(torch.tensor(6), p.shape[-1]).float())
    assert torch.equal(p[0, 2], torch.nn.functional.one_hot(torch.tensor(7), p.shape[-1]).float())
    assert torch.allclose(p[0, [0, 3]].sum(-1), torch.ones(2)) and not p.isnan().any()


def test_prior_is_uniform_over_image_ids_and_one_hot_where_forced():
    prior = TargetPipeline(SamplingConfig(), LAYOUT, 10).prior(torch.tensor([0, 3, 8, 20]))
    assert torch.allclose(prior[0, :6], torch.full((6,), 1 / 6)) and prior[0, 6:].sum() == 0
    assert prior[1, 6] == 1 and prior[2, 7] == 1 and torch.equal(prior[3], prior[0])
    shifted = TargetPipeline(SamplingConfig(), SHIFTED, 10).prior(torch.tensor([0, 3, 8]))  # ids 2..7
    assert torch.allclose(shifted[0, :4], torch.full((4,), 1 / 4)) and shifted[0, 4:].sum() == 0
    assert shifted[1, 4] == 1 and shifted[2, 5] == 1
