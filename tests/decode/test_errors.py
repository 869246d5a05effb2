"""Bad input gets a clear error naming the problem."""

import pytest

from jacobigen import ConfigError, ImageLayout, generate
from tests.helpers.models import LAYOUT, PROMPT, UNCOND, random_model


@pytest.fixture(scope="module")
def model():
    return random_model()


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"window": 0}, "window must be"),
        ({"top_k": 0}, "top_k must be"),
        ({"top_p": 0.0}, "top_p must be"),
        ({"top_p": 1.5}, "top_p must be"),
        ({"temperature": 0.0}, "temperature must be"),
        ({"temperature": -1.0}, "temperature must be"),
        ({"method": "nope"}, "unknown method 'nope'"),
        ({"cfg": 3.0}, "needs an unconditional prompt"),
        ({"seed": [1, 2], "uncond": [UNCOND, UNCOND, UNCOND], "cfg": 2.0}, "unconditional prompts"),
    ],
)
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


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"rows": 0, "cols": 4, "image_ids": (0, 4)}, "at least one row"),
        ({"rows": 2, "cols": 2, "image_ids": (4, 4)}, "empty"),
        ({"rows": 2, "cols": 2, "image_ids": (0, 4), "eol_id": 2}, "inside the image id range"),
    ],
)
def test_bad_layout(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        ImageLayout(**kwargs)


def test_layout_larger_than_vocab(model):
    with pytest.raises(ConfigError, match="exceed the model vocabulary"):
        generate(model, PROMPT, layout=ImageLayout(2, 2, (0, 10**5)))


@pytest.mark.parametrize(
    "prompt,message",
    [
        ("red heart", "prompt must be a non-empty list of token ids"),
        ([], "prompt must be a non-empty list"),
        ([1.5, 2.0], r"prompt token id must be an integer >= 0, got 1.5"),
        ([[4098, 7], "x"], "prompt must be a non-empty list"),
        ([-1], "prompt token id must be an integer >= 0, got -1"),
    ],
)
def test_bad_prompts(model, prompt, message):
    with pytest.raises(ConfigError, match=message):
        generate(model, prompt, layout=LAYOUT)


def test_prompts_as_arrays_and_tensors(model):
    import numpy as np
    import torch

    a = generate(model, np.array(PROMPT), layout=LAYOUT, method="ar", seed=np.int64(3))
    b = generate(model, [torch.tensor(PROMPT)], layout=LAYOUT, method="ar", seed=[3])
    assert torch.equal(a.tokens, b.tokens)


@pytest.mark.parametrize(
    "seed,message",
    [
        (2**32, r"seed must be an integer in \[0, 4294967295\], got 4294967296"),
        (-1, "seed must be an integer in"),
        (2**63, "seed must be an integer in"),
        (1.5, "seed must be an integer in"),
        ([0, 2**32], "got 4294967296"),
    ],
)
def test_seeds_never_wrap(model, seed, message):
    with pytest.raises(ConfigError, match=message):
        generate(model, PROMPT, layout=LAYOUT, seed=seed)
    with pytest.raises(ConfigError, match="passes the largest seed"):
        generate(model, [PROMPT, PROMPT], layout=LAYOUT, seed=2**32 - 1)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (
            {"window": 10**9},
            r"window 1000000000 is longer than a block can use: the image has 273 tokens .* \(window <= 4369\)",
        ),
        ({"window": "8"}, "window must be a whole number"),
        ({"batch_size": 0}, "batch_size must be an integer >= 1"),
        ({"cfg": float("nan"), "uncond": UNCOND}, "cfg scale must be a finite number, got nan"),
        ({"temperature": float("inf")}, "temperature must be a finite number > 0"),
        ({"top_k": True}, "top_k must be an integer >= 1, got True"),
        ({"method": "sjd-vp", "vp_history": "4"}, "vp_history must be an integer"),
        ({"method": "sjd-vp", "vp_weight": float("nan")}, "vp_weight must be a finite number"),
        ({"method": "sjd-vp", "vp_top_k": 0}, "vp_top_k must be an integer >= 1"),
        ({"method": "gsd", "gsd_k": 1.5}, "gsd_k must be an integer"),
        ({"method": "lantern", "lantern_delta": float("nan")}, "lantern_delta must be a finite number"),
        ({"method": "sjd-pac", "tree_depth": 100}, "span more than 4096 tree nodes"),
    ],
)
def test_bad_sizes_and_option_types(model, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        generate(model, PROMPT, layout=LAYOUT, **kwargs)


def test_a_batch_that_cannot_fit_is_refused_with_numbers(model, monkeypatch):
    import torch

    from jacobigen.core import limits

    monkeypatch.setattr(limits, "free_memory", lambda device: 2**20)
    with pytest.raises(ConfigError, match=r"a batch of 2 sequence\(s\) at window 32 needs about .* MiB .* is free"):
        generate(model, PROMPT, layout=LAYOUT, method="sjd", window=32, seed=[1, 2], batch_size=2)
    monkeypatch.undo()
    whole = generate(model, PROMPT, layout=LAYOUT, seed=list(range(6)), method="sjd", window=8)
    monkeypatch.setattr(limits, "free_memory", lambda device: 8 * 2**20)  # room for a few rows: bounded batches
    bounded = generate(model, PROMPT, layout=LAYOUT, seed=list(range(6)), method="sjd", window=8)
    assert bounded.stats.nfe > max(bounded.stats.sequence_nfe) + 6  # rows were refilled
    assert torch.equal(bounded.tokens, whole.tokens)


def test_corrupted_weights_are_refused(tmp_path, model):
    import torch

    from jacobigen import WeightsError, load_transformer, save_transformer

    with torch.no_grad():
        broken = random_model()
        broken.head.weight[0, 0] = float("nan")
    save_transformer(broken, tmp_path / "w.safetensors")
    with pytest.raises(WeightsError, match="hold NaN or infinite values .*head.weight"):
        load_transformer(tmp_path / "w.safetensors")
    with pytest.raises(WeightsError, match=r"the model \(Transformer\) returned NaN or \+inf logits"):
        generate(broken, PROMPT, layout=LAYOUT)
