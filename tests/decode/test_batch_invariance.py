"""With ``deterministic=True`` a batch never changes a sequence (issues 39, 49): in float32, sampled
(no greedy shortcut), presets that together combine every pair of parts (tests/helpers/presets.py)
give each sequence the same tokens alone, in one batch, and one at a time with refill, on the random
model, and a preset of each kind of part on the shipped model (PJD's there one row at a time only:
see the test). The batch shares each forward, run on row-invariant kernels
(:mod:`jacobigen.core.invariant`); two mutants, a forward and a linear kernel whose rows depend on
the row count, are shown to fail the same check."""

from functools import cache

import pytest
import torch

from jacobigen import METHODS, generate
from jacobigen.core import invariant
from jacobigen.models import load_bundle
from tests.helpers.models import LAYOUT, PROMPT, UNCOND, random_model
from tests.helpers.presets import covering

FAST = ["scd-gs"]
SLOW = covering([m for m in METHODS if m not in FAST])
# prompts of different lengths: different prefill widths and cache capacities alone and batched
PROMPTS = [PROMPT, PROMPT + [11, 12, 13, 14, 15, 16, 17], PROMPT[:2], PROMPT + [5]]
TEXTS = ["sun", "red heart", "a blue fish in the sea", "green tree"]


@cache
def shipped():
    return load_bundle("default")


def random_runs(method: str, **kw):
    model = random_model()
    kw = {"deterministic": True, **kw}
    common = dict(layout=LAYOUT, uncond=UNCOND, cfg=3.0, top_k=64, method=method, window=16, **kw)
    alone = [generate(model, p, seed=[10 + i], **common).tokens[0] for i, p in enumerate(PROMPTS)]
    seeds = [10 + i for i in range(len(PROMPTS))]
    return alone, [generate(model, PROMPTS, seed=seeds, batch_size=b, **common).tokens for b in (None, 3)]


@cache
def shipped_alone(method: str) -> tuple:
    pipe = shipped()
    return tuple(
        pipe.generate([t], method=method, window=32, seed=[i], deterministic=True)[0].tokens[0]
        for i, t in enumerate(TEXTS)
    )


def shipped_runs(method: str, sizes=(None, 2), **kw):
    seeds = list(range(len(TEXTS)))
    batches = [
        shipped().generate(TEXTS, method=method, window=32, seed=seeds, batch_size=b, deterministic=True, **kw)
        for b in sizes
    ]
    return shipped_alone(method), [gen.tokens for gen, _ in batches]


def check(runs, method: str) -> None:
    alone, batches = runs(method)
    for tokens in batches:
        for i, one in enumerate(alone):
            assert torch.equal(tokens[i], one), (method, i, int((tokens[i] != one).sum()))


@pytest.mark.parametrize("method", FAST)
def test_random_model_alone_equals_batched(method):
    check(random_runs, method)


@pytest.mark.slow
def test_shipped_model_alone_equals_batched():
    check(shipped_runs, "scd-mc")


@pytest.mark.slow
@pytest.mark.parametrize("method", SLOW)
def test_presets_of_every_pair_of_parts_alone_equal_batched_on_the_random_model(method):
    check(random_runs, method)


# on the shipped model, one preset per kind of part (every pair of parts runs on the random model above):
# plain AR, the proactive tree, each relaxed verifier, the verification prior (with lantern: lantern+vp
# first caught attention rounding by cache length), PJD's rows with coupling and the tree (below);
# scd-mc with refill above
SHIPPED = ["ar", "sjd-pac", "lantern+vp", "gsd"]


@pytest.mark.slow
@pytest.mark.parametrize("method", SHIPPED)
def test_presets_alone_equal_batched_on_the_shipped_model(method):
    """One batch of all four (refill and compaction on this model: scd-mc above; on the random one:
    every preset)."""
    check(lambda m: shipped_runs(m, sizes=(None,)), method)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["pjd+scd-mc+pac"])
def test_row_parallel_presets_equal_alone_one_row_at_a_time(method):
    """PJD's block holds as many segments, each as wide, as the batch's widest row needs (and its
    tree as deep), so batched its rows may see another block than alone (the README says so); one
    row at a time, with refill, they equal alone."""
    check(lambda m: shipped_runs(m, sizes=(1,)), method)


def rounding_by_row_count(model):
    """The model with a forward whose result depends on how many rows it runs (as a matmul's
    rounding does on kernels that block by shape), whatever kernels it runs on."""
    forward = model.forward

    def by_rows(tokens, positions, mask, cache, **kw):
        return forward(tokens, positions, mask, cache, **kw) * (1 + 1e-3 * tokens.shape[0])

    model.forward = by_rows
    return model


COMMON = dict(layout=LAYOUT, uncond=UNCOND, cfg=3.0, top_k=64, method="scd-mc", window=16)
SEEDS = [10 + i for i in range(len(PROMPTS))]


def alone_and_batched(model, **kw) -> tuple[list, torch.Tensor]:
    alone = [generate(model, p, seed=[s], **COMMON, **kw).tokens[0] for p, s in zip(PROMPTS, SEEDS, strict=True)]
    return alone, generate(model, PROMPTS, seed=SEEDS, batch_size=3, **COMMON, **kw).tokens


def moved(run) -> int:
    alone, batched = run
    return sum(not torch.equal(batched[i], a) for i, a in enumerate(alone))


@pytest.mark.slow
def test_a_forward_that_depends_on_its_row_count_fails_the_check():
    """Mutant 1: the model's whole forward depends on its row count; deterministic mode does not
    hide it (the check above fails); only the per-sequence fallback gives every sequence its
    tokens alone."""
    model = rounding_by_row_count(random_model())
    assert moved(alone_and_batched(model, deterministic=True)) > 0
    assert moved(alone_and_batched(model, deterministic="per-sequence")) == 0


@pytest.mark.slow
def test_a_linear_kernel_that_rounds_by_row_count_fails_the_check(monkeypatch):
    """Mutant 2: the row-invariant linear replaced by one whose result depends on its row count
    (a kernel that blocks by shape); the check fails. The real kernels on the same model pass."""
    model = random_model()
    assert moved(alone_and_batched(model, deterministic=True)) == 0

    def by_rows(plan, input, weight, bias=None):
        rows = input.reshape(-1, input.shape[-1]).shape[0]
        return torch.nn.functional.linear(input, weight * (1 + 1e-4 * rows), bias)

    monkeypatch.setattr(invariant.Plan, "__call__", by_rows)
    assert moved(alone_and_batched(model, deterministic=True)) > 0
