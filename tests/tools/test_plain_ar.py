"""The plain KV-cache loop that the bench times beside ``ar``: valid images, and AR's tokens when
sampling is deterministic (top-k 1 leaves one choice per position, so both loops must agree)."""

import pytest
import torch

from jacobigen import generate
from jacobigen.models import random_bundle
from jacobigen.models.bundle import encode_one
from jacobigen.tools.plain_ar import plain_ar, plain_ar_batch


@pytest.fixture(scope="module")
def pipe():
    return random_bundle()


@pytest.mark.parametrize("cfg", [1.0, 3.0])
def test_plain_loop_makes_valid_images(pipe, cfg):
    _, prompt, uncond = encode_one(pipe, "red heart")
    out = plain_ar(pipe.model, pipe.layout, prompt, uncond, cfg=cfg, top_k=50, seed=1)
    forced = pipe.layout.forced()
    lo, hi = pipe.layout.image_ids
    assert out.shape == (pipe.layout.length,)
    assert torch.equal(out[forced >= 0], forced[forced >= 0])
    free = out[forced < 0]
    assert ((free >= lo) & (free < hi)).all() and free.unique().numel() > 1
    again = plain_ar(pipe.model, pipe.layout, prompt, uncond, cfg=cfg, top_k=50, seed=1)
    assert torch.equal(out, again)


@pytest.mark.parametrize("cfg", [1.0, 3.0])
def test_plain_loop_matches_ar_when_greedy(pipe, cfg):
    """Different prompt lengths in the CFG pair exercise the left padding."""
    _, prompt, uncond = encode_one(pipe, "a longer prompt than the unconditional one")
    plain = plain_ar(pipe.model, pipe.layout, prompt, uncond, cfg=cfg, top_k=1, seed=0)
    ar = generate(pipe.model, prompt, layout=pipe.layout, uncond=uncond, cfg=cfg, method="ar", top_k=1, seed=5).tokens[
        0
    ]
    assert torch.equal(plain, ar)


def test_plain_loop_top_p_keeps_the_most_likely_ids(pipe):
    """A top-p below every probability leaves the argmax alone: AR's greedy tokens (Cosmos and
    Anole sample with top-p, and the bench times this loop beside them)."""
    _, prompt, _ = encode_one(pipe, "red heart")
    plain = plain_ar(pipe.model, pipe.layout, prompt, top_p=1e-6, seed=3)
    ar = generate(pipe.model, prompt, layout=pipe.layout, method="ar", top_k=1).tokens[0]
    assert torch.equal(plain, ar)
    varied = plain_ar(pipe.model, pipe.layout, prompt, top_p=0.9, seed=3)
    forced = pipe.layout.forced()
    assert varied[forced < 0].unique().numel() > 1


@pytest.mark.parametrize("cfg", [1.0, 3.0])
def test_batched_plain_loop_matches_ar_per_prompt_when_greedy(pipe, cfg):
    """Rows of different prompt lengths share one left-padded batch; each must still decode alone."""
    texts = ["red heart", "a longer prompt than the other one"]
    encoded = [encode_one(pipe, t) for t in texts]
    batch = plain_ar_batch(pipe.model, pipe.layout, [e[1] for e in encoded], [e[2] for e in encoded], cfg=cfg, top_k=1)
    assert batch.shape == (2, pipe.layout.length)
    for row, (model, prompt, uncond) in zip(batch, encoded, strict=True):
        ar = generate(model, prompt, layout=pipe.layout, uncond=uncond, cfg=cfg, method="ar", top_k=1).tokens[0]
        assert torch.equal(row, ar)
