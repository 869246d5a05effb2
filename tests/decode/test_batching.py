"""Batches with continuous refill: each sequence advances by its own accepted length, a finished
row takes the next prompt, and no sequence's tokens depend on the company it kept."""

import pytest
import torch

from jacobigen import METHODS, generate
from jacobigen.core.layout import ImageLayout
from jacobigen.core.sampling import SamplingConfig
from jacobigen.decode.api import make_decoder
from jacobigen.tools.exactness import exact_distribution, gof_pvalue, layout, tiny_model
from tests.helpers.models import CODES, PROMPT, UNCOND, random_model

LAYOUT = ImageLayout(4, 6, (0, CODES), eol_id=CODES, end_id=CODES + 1)  # 29 tokens: fast

LOSSLESS = [name for name, m in METHODS.items() if m.lossless]
# prompts of different lengths: rows start, advance and finish out of step
PROMPTS = [PROMPT, PROMPT[:1], PROMPT + [3, 11, 12], PROMPT[:2], PROMPT + [5]]
SEEDS = [5, 6, 7, 8, 9]


@pytest.fixture(scope="module")
def model():
    return random_model()


@pytest.mark.parametrize("method", LOSSLESS)
def test_refilled_batch_matches_each_sequence_alone(model, method):
    kw = dict(layout=LAYOUT, method=method, window=8, cfg=2.0, uncond=UNCOND)
    batch = generate(model, PROMPTS, seed=SEEDS, batch_size=2, top_k=1, **kw)
    for i, (p, s) in enumerate(zip(PROMPTS, SEEDS, strict=True)):
        alone = generate(model, p, seed=s, top_k=1, **kw)
        assert torch.equal(batch.tokens[i], alone.tokens[0]), (method, i)
        assert batch.stats.sequence_nfe[i] == alone.stats.sequence_nfe[0]


def test_sampled_tokens_do_not_depend_on_batch_size(model):
    kw = dict(layout=LAYOUT, method="scd-mc+pac+vp", window=16, seed=SEEDS, deterministic=True)  # bit for bit
    ref = generate(model, PROMPTS, **kw).tokens
    for bs in (1, 2, 3):
        assert torch.equal(generate(model, PROMPTS, batch_size=bs, **kw).tokens, ref)


def test_refill_keeps_rows_busy(model):
    kw = dict(layout=LAYOUT, method="sjd", window=8, seed=list(range(6)))
    one_at_a_time = generate(model, [PROMPT] * 6, batch_size=1, **kw).stats
    refilled = generate(model, [PROMPT] * 6, batch_size=3, **kw).stats
    assert one_at_a_time.sequence_nfe == refilled.sequence_nfe
    assert one_at_a_time.nfe == sum(one_at_a_time.sequence_nfe)
    # three rows in flight: about a third of the passes, never fewer than the slowest third needs
    assert max(refilled.sequence_nfe) <= refilled.nfe < sum(refilled.sequence_nfe) / 2
    assert refilled.histogram() == one_at_a_time.histogram()


def test_bad_batch_size_is_a_clear_error(model):
    from jacobigen.core.errors import ConfigError

    with pytest.raises(ConfigError, match="batch_size"):
        generate(model, PROMPT, layout=LAYOUT, batch_size=0)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["sjd", "scd-mc+pac+vp"])
def test_refilled_batches_are_exact_per_sequence(method):
    """Two prompts of different lengths interleaved, 64 rows in flight, 20,000 samples each: every
    sequence's law is the exact AR law of its own prompt."""
    tiny, lay, plain = tiny_model(), layout(True), SamplingConfig()
    prompts = [[5, 6], [1, 2, 5, 6, 2]]
    n = 20_000
    parts = METHODS[method].build(4, **({"tree_depth": 3, "tree_width": 2} if "pac" in method else {}))
    rows = [prompts[i % 2] for i in range(2 * n)]
    decoder = make_decoder(tiny, lay, plain, parts)  # 64 rows share each forward
    tokens, stats = decoder.run(rows, list(range(2 * n)), batch_size=64)
    assert len(set(stats.sequence_nfe)) > 1  # sequences did finish at different iterations
    exact = [exact_distribution(tiny, lay, plain, p) for p in prompts]
    for i in range(2):
        assert gof_pvalue(exact[i], tokens[i::2]) > 1e-4
        assert gof_pvalue(exact[1 - i], tokens[i::2]) < 1e-8  # the test tells the prompts apart


@pytest.mark.parametrize("method", ["pjd", "pjd+scd-mc+pac"])
def test_pjd_rows_refill(model, method):
    """PJD runs on the same step and batch scheduler: refilled rows give each sequence the tokens
    and forward count it gets in one batch."""
    kw = dict(layout=LAYOUT, method=method, window=8, seed=SEEDS)
    whole = generate(model, PROMPTS, **kw)
    batched = generate(model, PROMPTS, batch_size=2, **kw)
    assert torch.equal(batched.tokens, whole.tokens)
    assert batched.stats.sequence_nfe == whole.stats.sequence_nfe
    assert batched.stats.nfe > whole.stats.nfe and batched.stats.batch == len(PROMPTS)


def test_cli_batch_size(tmp_path):
    from click.testing import CliRunner

    from jacobigen.cli import main

    res = CliRunner().invoke(
        main,
        [
            "generate",
            "red heart",
            "blue car",
            "--model",
            "random",
            "--num-images",
            "2",
            "--batch-size",
            "3",
            "--window",
            "8",
            "--no-progress",
            "--out",
            str(tmp_path / "g.png"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "for 4 image(s)" in res.output and (tmp_path / "g.png").exists()
