"""SCD's coupling strength: alpha = 0 drafts as SJD does, alpha = 1 is full coupling (its
exactness at intermediate values lives in test_exactness.py)."""

import pytest
import torch

from jacobigen import METHODS, generate
from jacobigen.core.errors import ConfigError
from jacobigen.tools.exactness import layout, tiny_model

KW = dict(layout=layout(True, rows=4, cols=6), seed=list(range(6)), cfg=2.0, uncond=[7], window=8)


@pytest.fixture(scope="module")
def model():
    return tiny_model(sharpness=3.0)


@pytest.mark.parametrize("method", ["scd-mc", "scd-gs"])
def test_alpha_ends_are_sjd_and_full_coupling(model, method):
    sjd = generate(model, [5, 6], method="sjd", **KW)
    assert torch.equal(generate(model, [5, 6], method=method, alpha=0.0, **KW).tokens, sjd.tokens)
    full = generate(model, [5, 6], method=method, **KW)
    assert torch.equal(generate(model, [5, 6], method=method, alpha=1.0, **KW).tokens, full.tokens)
    half = generate(model, [5, 6], method=method, alpha=0.5, **KW)
    assert not torch.equal(half.tokens, full.tokens) and not torch.equal(half.tokens, sjd.tokens)


def test_alpha_is_an_option_of_coupled_drafters_only():
    assert "alpha" in METHODS["sjd-pac"].options and "alpha" not in METHODS["sjd"].options
    for bad in (-0.1, 1.5, "x", True):
        with pytest.raises(ConfigError, match="alpha"):
            METHODS["scd-gs"].build(8, alpha=bad)
