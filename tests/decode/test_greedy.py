"""With top-k = 1 every lossless preset must return exactly the AR tokens."""

import pytest
import torch

from jacobigen import METHODS, generate
from tests.helpers.models import LAYOUT, PROMPT, UNCOND, random_model

LOSSLESS = [name for name, m in METHODS.items() if m.lossless and name != "ar"]


@pytest.fixture(scope="module")
def model():
    return random_model()


@pytest.fixture(scope="module")
def ar_tokens(model):
    return generate(model, PROMPT, layout=LAYOUT, method="ar", top_k=1, cfg=2.0, uncond=UNCOND).tokens


@pytest.mark.parametrize("window", [2, 16, 33])
@pytest.mark.parametrize("method", LOSSLESS)
def test_greedy_matches_ar(model, ar_tokens, method, window):
    gen = generate(model, PROMPT, layout=LAYOUT, method=method, window=window, top_k=1, cfg=2.0, uncond=UNCOND)
    assert torch.equal(gen.tokens, ar_tokens)
    assert gen.stats.nfe <= LAYOUT.length


def test_ar_counts_one_forward_per_token(model, ar_tokens):
    gen = generate(model, PROMPT, layout=LAYOUT, method="ar", top_k=1)
    assert gen.stats.nfe == LAYOUT.length
    assert gen.stats.histogram() == {1: LAYOUT.length - 1}


def test_layout_structure_in_output(ar_tokens):
    t = ar_tokens[0]
    assert torch.all(t[16 : 16 * 17 : 17] == LAYOUT.eol_id) and t[-1] == LAYOUT.end_id
    grid = LAYOUT.grid(ar_tokens)
    assert grid.shape == (1, 16, 16) and int(grid.max()) < 4096
