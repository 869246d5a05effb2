"""Same seed, same tokens (docs/DESIGN.md §10): with the invariant verifier every lossless preset
commits exactly ``ar``'s tokens for the seed, whatever the window, tree, schedule or batch, given the
same logits. Equality tests, no statistics.

In deterministic mode a chain's block computes each position's logits as the same bits as ``ar``'s
single token (core.invariant), so chain presets are equal by construction, in float32 and bfloat16,
on the random model and the embedded ``emoji`` model. A proactive tree's node attends to its
ancestors through gaps in the cache (its siblings' slots), which sums the same terms in other lanes:
its logits differ from ``ar``'s by rounding, so tree presets are checked in float32 only, where a
rounding difference moves a Gumbel-max choice at a near-tie (about once in 10^5 tokens, measured:
docs/exactness.md), not in bfloat16, where it moves often. A verifier whose noise moves with the
iteration (exact in distribution) is shown to fail the same check; the G-tests of
tests/decode/test_exactness.py check the distribution."""

from functools import cache

import pytest
import torch

from jacobigen import METHODS, generate, get_method
from jacobigen.core.errors import ConfigError
from jacobigen.core.rng import Stream
from jacobigen.decode.methods import same_as_ar
from jacobigen.models import load_bundle
from jacobigen.parts.verifiers import SameAsAr
from tests.helpers.models import LAYOUT, PROMPT, UNCOND, random_model

LOSSLESS = [name for name, m in METHODS.items() if m.lossless and name != "ar"]
KW = dict(layout=LAYOUT, uncond=UNCOND, cfg=3.0, top_k=64, seed=[1, 2, 3], deterministic=True)


@cache
def model():
    return random_model()


@cache
def ar_tokens() -> torch.Tensor:
    return generate(model(), PROMPT, method="ar", **KW).tokens


@pytest.mark.parametrize("window", [4, 16])
@pytest.mark.parametrize("method", LOSSLESS)
def test_every_lossless_preset_commits_ars_tokens(method, window):
    gen = generate(model(), PROMPT, method=method, window=window, same_as_ar=True, **KW)
    assert gen.method.part("verifier").name == "invariant"
    assert torch.equal(gen.tokens, ar_tokens()), (method, int((gen.tokens != ar_tokens()).sum()))


def test_pjd_at_one_row_at_a_time_and_the_frame_copy_commit_ars_tokens():
    for method, options in [("pjd+invariant", {"pjd_context": LAYOUT.cols}), ("scd-gs+copy+invariant", {})]:
        gen = generate(model(), PROMPT, method=method, window=8, **KW, **options)
        assert torch.equal(gen.tokens, ar_tokens()), method


def test_the_papers_verifier_draws_other_tokens_and_costs_no_fewer_forwards_than_needed():
    """Without the invariant verifier a lossless method draws another sample (the reason for it)."""
    gen = generate(model(), PROMPT, method="scd-gs", window=16, **KW)
    assert not torch.equal(gen.tokens, ar_tokens())


class IterationNoise(SameAsAr):
    """Mutant: Gumbel-max with noise drawn afresh each iteration. Each token is still an exact
    sample (the G-test cannot tell), but a seed's tokens now depend on the schedule."""

    def targets(self, p, support, positions, draws):
        g = draws.gumbel(positions, p.shape[-1], Stream.GUMBEL)
        return torch.zeros_like(p).scatter_(-1, (p.log() + g).argmax(-1, keepdim=True), 1.0)


def test_noise_that_moves_with_the_iteration_fails_the_equality_check():
    parts = get_method("scd-gs").build(16)
    from jacobigen.decode.jacobi import Parts

    mutant = Parts(parts.drafter, IterationNoise(), 16)
    from jacobigen.core.sampling import SamplingConfig
    from jacobigen.decode.api import make_decoder, prompt_rows

    sampling = SamplingConfig(cfg=3.0, top_k=64)
    rows, seeds = prompt_rows(PROMPT, [1, 2, 3], UNCOND, True)
    tokens, _ = make_decoder(model(), LAYOUT, sampling, mutant).run(rows, seeds)
    assert not torch.equal(tokens, ar_tokens())


def test_a_lossy_method_has_no_same_as_ar_variant():
    for name in ("gsd", "lantern", "pjd"):
        with pytest.raises(ConfigError, match="lossy"):
            same_as_ar(get_method(name))
    assert same_as_ar(get_method("ar")) is METHODS["ar"]
    assert same_as_ar(get_method("sjd-pac")).parts_text == "scd-mc+pac+invariant"


# --- the embedded emoji model, deterministic: bit-identical logits whatever the block -------------

TEXTS = ["red heart", "grinning face", "cat face", "sun"]


@cache
def emoji(dtype: str):
    return load_bundle("emoji", "cpu", dtype=dtype)


@cache
def emoji_ar(dtype: str) -> torch.Tensor:
    return emoji(dtype).generate(TEXTS, method="ar", seed=[0, 1, 2, 3], deterministic=True)[0].tokens


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize(("method", "window"), [("scd-gs", 16), ("scd-mc", 32)])
def test_emoji_batched_commits_ars_tokens_in_deterministic_mode(dtype, method, window):
    gen, _ = emoji(dtype).generate(
        TEXTS, method=method, window=window, seed=[0, 1, 2, 3], deterministic=True, same_as_ar=True
    )
    assert torch.equal(gen.tokens, emoji_ar(dtype)), [
        int((a != b).sum()) for a, b in zip(gen.tokens, emoji_ar(dtype), strict=True)
    ]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_emoji_alone_at_window_64_commits_ars_tokens_in_deterministic_mode(dtype):
    gen, _ = emoji(dtype).generate(
        TEXTS[:1], method="scd-mc+vp", window=64, seed=0, deterministic=True, same_as_ar=True
    )
    assert torch.equal(gen.tokens[0], emoji_ar(dtype)[0])


def test_emoji_tree_commits_ars_tokens_in_float32():
    gen, _ = emoji("float32").generate(
        TEXTS, method="sjd-pac", window=32, seed=[0, 1, 2, 3], deterministic=True, same_as_ar=True
    )
    assert torch.equal(gen.tokens, emoji_ar("float32"))
