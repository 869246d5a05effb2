"""Bad request bodies are refused field by field, with the library's own ranges."""

import pytest

from jacobigen.serve.fields import MAX_PROMPT_CHARS, FieldError, Group, parse, pinned_group
from jacobigen.serve.policy import BEST

DEFAULTS = {"cfg": 3.0, "temperature": 1.0, "top_k": 200}


def parsed(**body):
    return parse({"prompt": "red heart", **body}, DEFAULTS, "64x64", "emoji", 273)


@pytest.mark.parametrize(
    "body, field, words",
    [
        ({"n": 0}, "n", "greater than or equal to 1"),
        ({"n": "2"}, "n", "integer"),
        ({"method": "nope"}, "method", "presets: ar"),
        ({"method": 3}, "method", "'auto' or one of ar"),
        ({"window": 0}, "window", "window must be an integer"),
        ({"method": "ar", "window": 8}, "window", "always runs window 1"),
        ({"temperature": -1}, "temperature", "> 0"),
        ({"top_p": 2}, "top_p", "(0, 1]"),
        ({"top_k": 0}, "top_k", "top_k"),
        ({"cfg": "high"}, "cfg", "cfg scale"),
        ({"seed": -1}, "seed", "seed"),
        ({"seed": "x"}, "seed", "seed must be an integer in [0, 4294967295], got 'x'"),  # the range, no stray space
        ({"seed": 2**32 - 1, "n": 2}, "seed", "largest seed"),
        ({"size": "1024x1024"}, "size", "64x64"),
        ({"response_format": "url"}, "response_format", "b64_json"),
        ({"stream": "yes"}, "stream", "valid boolean"),
        ({"model": "dall-e-3"}, "model", "'emoji'"),
        ({"colour": "red"}, "colour", "the fields are"),
        ({"prompt": ""}, "prompt", "non-empty"),
        ({"prompt": "x" * (MAX_PROMPT_CHARS + 1)}, "prompt", f"at most {MAX_PROMPT_CHARS}"),
        ({"prompt": "\ud800"}, "prompt", "not valid Unicode"),  # a lone surrogate: JSON spells it, UTF-8 cannot
        ({"user": ["ok", {"k": "a\udfff"}]}, "user", "not valid Unicode"),
        ({"\ud800": 1}, "body", "not valid Unicode"),
        ({"prompt": None}, "prompt", "required"),
        ({"colour": None}, "colour", "the fields are"),
    ],
)
def test_bad_field_is_named(body, field, words):
    with pytest.raises(FieldError) as e:
        parsed(**body)
    assert e.value.field == field and words in str(e.value)


def test_defaults_are_the_models_and_auto_picks_later():
    req = parsed()
    assert (req.sampling.cfg, req.sampling.top_k, req.seeds, req.method, req.window) == (3.0, 200, [0], None, None)
    assert pinned_group(req, BEST) is None


def test_pinned_groups():
    assert pinned_group(parsed(method="ar"), BEST).window == 1
    assert pinned_group(parsed(method="sjd"), BEST).window == 32  # generate's default window
    assert pinned_group(parsed(window=8, seed=5, n=3), BEST) == Group(BEST, 8, parsed().sampling)
    assert parsed(seed=5, n=3).seeds == [5, 6, 7]


def test_null_means_not_set():
    """OpenAI clients send null for the fields they leave out: each gets its default, the model's
    recommended guidance and top-k included (issue 61)."""
    unset = {k: None for k in ("n", "size", "response_format", "method", "window", "seed", "stream", "model", "user")}
    sampling = {k: None for k in ("cfg", "temperature", "top_k", "top_p")}
    assert parsed(**unset, **sampling) == parsed()
    assert (parsed(cfg=None).sampling.cfg, parsed(top_k=None).sampling.top_k) == (3.0, 200)
