"""The model contract (jacobigen.core.contract.ImageModel): every model behind the decoders keeps it, and a
model that breaks it gets a ConfigError or a named assertion instead of a deep failure."""

import pytest
import torch
from torch import nn

from jacobigen import ConfigError, generate
from jacobigen.core.contract import check_model, conformance
from jacobigen.models import random_bundle
from jacobigen.models.bundle import encode_one
from tests.helpers.models import LAYOUT, PROMPT, random_model
from tests.helpers.need import need


def embedded():
    from jacobigen.models import load_bundle

    return load_bundle("default", "cpu")


def family(name):
    need("transformers")
    from tests.models.test_families import BUILD

    return BUILD[name]()[1]


def cosmos():
    from jacobigen.models.families.cosmos import cosmos_pipeline
    from tests.models.test_cosmos import random_cosmos

    return cosmos_pipeline(random_cosmos())


PIPELINES = {
    "embedded": embedded,
    "random": random_bundle,
    "cosmos": cosmos,
    **{
        name: (lambda n=name: family(n))
        for name in ("chameleon", "anole", "janus", "emu3", "llamagen-c2i", "llamagen-t2i")
    },
}


@pytest.mark.parametrize("name", list(PIPELINES))
def test_every_model_keeps_the_contract(name):
    pipe = PIPELINES[name]()
    text = "3" if name == "llamagen-c2i" else "a red cat"
    lo = pipe.layout.image_ids[0]
    if name == "cosmos":  # condition tokens
        model, prompt = pipe.model, [5, 17, 33, 2, 60, 41]
    else:
        model, prompt, _ = encode_one(pipe, text)
    conformance(model, prompt + list(pipe.layout.header), [lo + i for i in (3, 1, 4, 1, 5, 9)])


# --- models that break it -------------------------------------------------------------------------


class Wrapped(nn.Module):
    """The random test model behind a wrapper that a test bends one way or another."""

    def __init__(self, max_seq_len: int | None = None):
        super().__init__()
        self.inner = random_model()
        self.vocab_size = self.inner.vocab_size
        self.max_seq_len = max_seq_len or self.inner.max_seq_len

    def new_cache(self, rows, capacity):
        return self.inner.new_cache(rows, capacity)

    def forward(self, tokens, positions=None, mask=None, cache=None):
        return self.inner(tokens, positions, mask, cache)


class AdvancesLengths(Wrapped):
    def forward(self, tokens, positions=None, mask=None, cache=None):
        out = super().forward(tokens, positions, mask, cache)
        if cache is not None:
            cache.lengths += tokens.shape[1]
        return out


class WritesAtSlotZero(Wrapped):
    def forward(self, tokens, positions=None, mask=None, cache=None):
        if cache is None:
            return super().forward(tokens, positions, mask, cache)
        lengths, cache.lengths = cache.lengths, torch.zeros_like(cache.lengths)
        try:
            return super().forward(tokens, positions, mask, cache)
        finally:
            cache.lengths = lengths


@pytest.mark.parametrize(
    "model,message", [(AdvancesLengths, "changed cache.lengths"), (WritesAtSlotZero, "did not write its block")]
)
def test_conformance_names_the_broken_cache_rule(model, message):
    conformance(Wrapped(), PROMPT, [1, 2, 3, 4])
    with pytest.raises(AssertionError, match=message):
        conformance(model(), PROMPT, [1, 2, 3, 4])


class NoParameters(nn.Module):
    vocab_size, max_seq_len = 4100, 320

    def new_cache(self, rows, capacity):
        return random_model().new_cache(rows, capacity)


class OwnCache(Wrapped):
    def new_cache(self, rows, capacity):
        return {"rows": rows, "capacity": capacity}


@pytest.mark.parametrize(
    "model,message", [(NoParameters, "has no parameters"), (OwnCache, "must return a jacobigen.core.cache.KVCache")]
)
def test_broken_models_get_config_errors(model, message):
    with pytest.raises(ConfigError, match=message):
        check_model(model())
    with pytest.raises(ConfigError, match=message):
        generate(model(), PROMPT, layout=LAYOUT, method="sjd", window=4)


class RecordsPositions(Wrapped):
    def forward(self, tokens, positions=None, mask=None, cache=None):
        self.highest = max(getattr(self, "highest", 0), int(positions.max()))
        return super().forward(tokens, positions, mask, cache)


@pytest.mark.parametrize("method", ["sjd", "sjd-pac", "pjd"])
def test_positions_stay_inside_the_context(method):
    """A prompt plus image that fill the context exactly: slots past the image end still get
    positions the model takes."""
    model = RecordsPositions(max_seq_len=len(PROMPT) + LAYOUT.length)
    generate(model, PROMPT, layout=LAYOUT, method=method, window=16, top_k=1)
    assert model.highest < model.max_seq_len
