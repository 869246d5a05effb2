"""Bad input gets a clear error naming the problem."""

import pytest

from jacobigen import ConfigError, ImageLayout, generate
from models import LAYOUT, PROMPT, UNCOND, random_model


@pytest.fixture(scope="module")
def model():
    return random_model()


@pytest.mark.parametrize("kwargs,message", [
    ({"window": 0}, "window must be"),
    ({"top_k": 0}, "top_k must be"),
    ({"top_p": 0.0}, "top_p must be"),
    ({"top_p": 1.5}, "top_p must be"),
    ({"temperature": 0.0}, "temperature must be"),
    ({"temperature": -1.0}, "temperature must be"),
    ({"method": "nope"}, "unknown method 'nope'"),
    ({"cfg": 3.0}, "needs an unconditional prompt"),
    ({"seed": [1, 2], "uncond": [UNCOND, UNCOND, UNCOND], "cfg": 2.0}, "unconditional prompts"),
])
def test_bad_settings(model, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        generate(model, PROMPT, layout=LAYOUT, **kwargs)


def test_prompt_longer_than_context(model):
    with pytest.raises(ConfigError, match="exceeds the model's context"):
        generate(model, [1] * 100, layout=LAYOUT)


def test_prompt_ids_out_of_vocab(model):
    with pytest.raises(ConfigError, match="prompt token ids"):
        generate(model, [10**6], layout=LAYOUT)


def test_unknown_method_option(model):
    with pytest.raises(ConfigError, match="has no option"):
        generate(model, PROMPT, layout=LAYOUT, method="sjd", depth=3)


@pytest.mark.parametrize("kwargs,message", [
    ({"rows": 0, "cols": 4, "image_ids": (0, 4)}, "at least one row"),
    ({"rows": 2, "cols": 2, "image_ids": (4, 4)}, "empty"),
    ({"rows": 2, "cols": 2, "image_ids": (0, 4), "eol_id": 2}, "inside the image id range"),
])
def test_bad_layout(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        ImageLayout(**kwargs)


def test_layout_larger_than_vocab(model):
    with pytest.raises(ConfigError, match="exceeds the model vocabulary"):
        generate(model, PROMPT, layout=ImageLayout(2, 2, (0, 10**5)))
