"""Extreme but finite sampling settings never produce an id outside the layout: for every preset,
any finite cfg, temperature down to the smallest float, top-k and top-p, and a model whose logits
are huge, every committed token is an allowed image id (or the forced structural id), including the
verifier's residual draws on rejection. ``cfg=1e300`` once made the sampler emit id 1282 of 1283."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from jacobigen import generate
from jacobigen.core.sampling import SamplingConfig, TargetPipeline
from jacobigen.decode.methods import METHODS
from jacobigen.tools.exactness import PROMPT, UNCOND, layout, tiny_model

LAYOUT = layout()
MODELS = {"peaked": tiny_model(), "huge logits": tiny_model(sharpness=1e6)}
FINITE = st.floats(allow_nan=False, allow_infinity=False)
CFG = st.one_of(st.sampled_from([1.0, 0.0, 1e300, -1e300, 3.0, 1e-300]), FINITE)
TEMPERATURE = st.one_of(
    st.sampled_from([5e-324, 1e-45, 1e-30, 1.0, 1e300]), st.floats(min_value=5e-324, max_value=1e308)
)
TOP_K = st.one_of(st.none(), st.integers(1, 12))
TOP_P = st.one_of(st.none(), st.sampled_from([5e-324, 1e-9, 1.0]), st.floats(min_value=1e-300, max_value=1.0))


def allowed_everywhere(tokens: torch.Tensor) -> bool:
    """Free positions hold image ids [0, 3); forced ones their structural id."""
    forced = LAYOUT.forced()
    lo, hi = LAYOUT.image_ids
    free = tokens[:, forced < 0]
    return bool(((free >= lo) & (free < hi)).all() and (tokens[:, forced >= 0] == forced[forced >= 0]).all())


@pytest.mark.parametrize("method", sorted(METHODS))
@settings(max_examples=25, deadline=None)
@given(
    model=st.sampled_from(sorted(MODELS)),
    cfg=CFG,
    temperature=TEMPERATURE,
    top_k=TOP_K,
    top_p=TOP_P,
    window=st.sampled_from([2, 4, 8]),
    seed=st.integers(0, 2**32 - 2),
)
def test_every_preset_stays_in_the_layout(method, model, cfg, temperature, top_k, top_p, window, seed):
    gen = generate(
        MODELS[model],
        PROMPT,
        layout=LAYOUT,
        method=method,
        window=window,
        seed=[seed, seed + 1],
        cfg=cfg,
        uncond=UNCOND,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
    )
    assert allowed_everywhere(gen.tokens), gen.tokens


@settings(max_examples=300, deadline=None)
@given(
    cfg=CFG,
    temperature=TEMPERATURE,
    top_k=TOP_K,
    top_p=TOP_P,
    logits=st.lists(st.one_of(FINITE, st.sampled_from([3.4e38, -3.4e38, 1e30, 0.0])), min_size=16, max_size=16),
)
def test_targets_are_distributions_over_allowed_ids(cfg, temperature, top_k, top_p, logits):
    """The pipeline itself: finite, summing to 1, zero outside the allowed ids, whatever the
    (finite, even float32-overflowing) logits and settings."""
    sampling = SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p, cfg=cfg)
    x = torch.tensor(logits, dtype=torch.float64).clamp(-3.4e38, 3.4e38).float().view(2, 1, 8)
    x = x if sampling.guided else x[:1]
    p = TargetPipeline(sampling, LAYOUT, 8)(x, torch.zeros(1, 1, dtype=torch.int64))
    assert bool(torch.isfinite(p).all()) and math.isclose(float(p.sum()), 1.0, rel_tol=1e-5)
    assert float(p[..., 3:].sum()) == 0.0
