"""Every random choice flows from the seed."""

import torch

from jacobigen import generate
from tests.helpers.models import LAYOUT, PROMPT, random_model


def test_same_seed_same_tokens_different_seed_different():
    model = random_model()
    a = generate(model, PROMPT, layout=LAYOUT, method="sjd", window=8, seed=3).tokens
    b = generate(model, PROMPT, layout=LAYOUT, method="sjd", window=8, seed=3).tokens
    c = generate(model, PROMPT, layout=LAYOUT, method="sjd", window=8, seed=4).tokens
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_batch_gives_each_sequence_its_own_seeded_tokens():
    model = random_model()
    batch = generate(model, PROMPT, layout=LAYOUT, method="sjd", window=8, seed=[5, 6, 7], top_k=1)
    for i, s in enumerate([5, 6, 7]):
        alone = generate(model, PROMPT, layout=LAYOUT, method="sjd", window=8, seed=s, top_k=1)
        assert torch.equal(batch.tokens[i], alone.tokens[0])
