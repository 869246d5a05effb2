"""GSD and LANTERN: exact with zero relaxation, measurably lossy at their defaults, within bounds.

TV bounds (total variation from the exact distribution of the enumerable model, 20,000 samples,
noise floor about 0.035): on its 3 image ids GSD's default group (k = 4, capped at the 2 other ids)
is the whole vocabulary, so every draft passes and the output is the draft law: measured 0.68-0.76,
bound 0.85. LANTERN (k = 8 capped at 2, delta = 0.1) measured 0.30, bound 0.40.
"""

import pytest
import torch

from jacobigen import METHODS, generate
from jacobigen.core.sampling import SamplingConfig
from jacobigen.parts.relaxed import GroupVerifier, latent_neighbours
from jacobigen.tools.exactness import exact_distribution, gof_pvalue, layout, sample, tiny_model, tv_distance
from tests.helpers.models import LAYOUT, PROMPT, random_model

N = 20_000
BOUNDS = {"gsd": 0.85, "lantern": 0.40, "lantern+vp": 0.40}


@pytest.fixture(scope="module")
def setup():
    model = tiny_model()
    return model, exact_distribution(model, layout(True), SamplingConfig())


def run(setup, method, window=4, **opts):
    model, ex = setup
    return ex, sample(model, layout(True), SamplingConfig(), METHODS[method].build(window, **opts), N)


@pytest.mark.slow
@pytest.mark.parametrize(
    "method,opts", [("gsd", {"gsd_k": 0}), ("lantern", {"lantern_k": 0}), ("lantern", {"lantern_delta": 0.0})]
)
def test_zero_relaxation_is_exact(setup, method, opts):
    ex, samples = run(setup, method, **opts)
    assert gof_pvalue(ex, samples) > 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("method", BOUNDS)
def test_defaults_are_lossy_within_bound(setup, method):
    ex, samples = run(setup, method)
    assert gof_pvalue(ex, samples) < 1e-8
    assert 0.1 < tv_distance(ex, samples) < BOUNDS[method]


def test_lossy_presets_are_labelled():
    for name in BOUNDS:
        assert not METHODS[name].lossless
    gen = generate(random_model(), PROMPT, layout=LAYOUT, method="lantern", window=8)
    assert gen.stats.as_dict()["lossless"] is False


def test_neighbours_match_brute_force_and_are_cached():
    model = random_model()
    table = latent_neighbours(model, (0, 4096), (0, model.vocab_size), 3)
    assert latent_neighbours(model, (0, 4096), (0, model.vocab_size), 3) is table
    lat = model.head.weight[:4096].detach()
    for i in [0, 17, 4095]:
        d = (lat - lat[i]).norm(dim=-1)
        d[i] = float("inf")
        assert set(table[i].tolist()) == set(d.topk(3, largest=False).indices.tolist())
    assert torch.equal(table[4096], torch.full((3,), 4096))
    # a table's rows and entries are columns of the decode's tables: ids less the span's start
    whole, span = (latent_neighbours(model, (10, 4096), (s, model.vocab_size), 3) for s in (0, 8))
    assert torch.equal(span, whole[8:] - 8)


def test_relaxed_greedy_still_matches_ar():
    """Top-k = 1 makes p one-hot, and relaxation never accepts a token outside p's support."""
    model = random_model()
    ar = generate(model, PROMPT, layout=LAYOUT, method="ar", top_k=1).tokens
    for m in BOUNDS:
        assert torch.equal(generate(model, PROMPT, layout=LAYOUT, method=m, window=16, top_k=1).tokens, ar)


def test_given_latents_place_the_neighbours_and_reach_the_verifier():
    """A bundle's VQ codebook (``latents=``) decides the neighbours, not the model's embeddings:
    with latents on a line, id i's neighbours are i - 1 and i + 1, and a decode through the
    bundle's path uses exactly that table."""
    model = random_model()
    line = torch.arange(4096, dtype=torch.float32)[:, None]
    table = latent_neighbours(model, (0, 4096), (0, model.vocab_size), 2, line)
    assert set(table[100].tolist()) == {99, 101}
    assert not torch.equal(table, latent_neighbours(model, (0, 4096), (0, model.vocab_size), 2))
    seen = []
    original = GroupVerifier.bind

    def spy(self, model, layout, latents=None):
        seen.append(latents)
        return original(self, model, layout, latents)

    GroupVerifier.bind = spy
    try:
        generate(model, PROMPT, layout=LAYOUT, method="gsd", window=8, latents=line)
    finally:
        GroupVerifier.bind = original
    assert seen and seen[0] is line


def test_the_emoji_bundles_carry_their_vq_codebook_as_latents():
    from jacobigen.models import load_bundle

    for spec in ("default", "emoji-video"):
        pipe = load_bundle(spec, device="cpu")
        lo, hi = pipe.layout.image_ids
        assert pipe.latents is not None and pipe.latents.shape[0] == hi - lo
        assert not hasattr(pipe.model, "latent_codebook")
