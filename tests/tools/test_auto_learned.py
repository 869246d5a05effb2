"""Issue 59: forwards per image learned where the model runs, and the prior that explores a model
with no figure. Every cost and figure below is set by the test (a fabricated cost curve, fabricated
comparable tables), so each decision is worked out by hand, not by the code under test."""

import copy
import json
import math

import pytest
import torch
from click.testing import CliRunner

from jacobigen.cli import main
from jacobigen.decode import auto, learned, prior
from jacobigen.decode.learned import Figure
from jacobigen.decode.steps import sampling_key
from jacobigen.models import random_bundle
from jacobigen.tools.auto import choose

from .test_auto import LENGTH, seed_record


@pytest.fixture
def cheap(tmp_path, monkeypatch):
    """The random model on a machine where a block costs about one token (10 ms + 0.1 ms x n) and
    bookkeeping 0.5 ms an iteration (scd-gs@8 0.6, sjd-pac@8 0.7): ar 10.6 ms a forward, 2.883 s an
    image; a window of 8 costs 11.3 ms an iteration (1.066x ar at one token per iteration), of 16
    12.1 ms (1.142x: past the bound); larger windows' forwards alone pass it."""
    monkeypatch.setenv("JACOBIGEN_CACHE", str(tmp_path / "cache"))
    bundle = random_bundle()
    curve = {n: 0.010 + 0.0001 * n for n in (1, 8, 16, 32, 64)}
    kept = {auto.label(m, w): 0.0005 for m, w in auto.candidates()}
    kept.update({"scd-gs@8": 0.0006, "sjd-pac@8": 0.0007})
    cache = auto.cache_file()
    seed_record(cache, bundle, curve, kept)
    return bundle, cache


def comparable(monkeypatch, compression: dict[int, float]):
    """Tables of other weights (a comparable layout) at which each window saved ``compression``."""
    figures = {f"scd-gs@{w}": LENGTH / c for w, c in compression.items()}
    monkeypatch.setattr(prior, "every_figure", lambda: [("other.json", LENGTH, figures)])


# --- the policy ------------------------------------------------------------------------------------


def test_the_worst_case_is_the_break_even_and_bounds_exploration():
    safe = prior.weigh(1.05, 1.0, 2.0)  # break-even 1.05x; expected 2.0 / 1.05 = 1.9x ar
    assert safe.worst == safe.break_even == pytest.approx(1.05) and safe.gain == pytest.approx(2 / 1.05)
    assert safe.explore
    risky = prior.weigh(1.2, 1.0, 4.0)  # 3.3x expected, but 1.2x ar's time at one token per iteration
    assert risky.gain > prior.EXPLORE_GAIN and not risky.explore
    assert not prior.weigh(1.0, 1.0, 1.4).explore  # safe, but 1.4x is no large gain
    assert not prior.weigh(1.0, 1.0, 3.0, probed=False).explore  # a bound, never a reason to try


def test_a_safe_candidate_with_a_large_expected_gain_is_explored(cheap, monkeypatch):
    bundle, cache = cheap
    comparable(monkeypatch, {8: 2.0})  # 136 forwards expected at window 8: 2.0 / 1.066 = 1.88x ar
    choice = choose(bundle, cache=cache)
    # scd-mc@8 is the cheapest window-8 candidate (0.5 ms of bookkeeping): 136 x 11.3 ms = 1.537 s
    assert (choice.method, choice.window) == ("scd-mc", 8) and choice.table is None
    assert choice.seconds == pytest.approx(1.5368) and choice.ar_seconds == pytest.approx(2.8832)
    assert choice.reason.startswith("exploring scd-mc@8") and "1.07x ar's time" in choice.reason
    assert "other.json" in choice.reason and choice.steps["scd-mc@8"]["source"] == "prior"


def test_a_large_gain_past_the_worst_case_bound_is_not_explored(cheap, monkeypatch):
    """Window 16 is expected at 4.0 / 1.142 = 3.5x ar but costs 1.142x ar at one token per iteration;
    window 8 is safe but expected at only 1.2 / 1.066 = 1.13x: ar runs. Ignoring the bound explores 16."""
    bundle, cache = cheap
    comparable(monkeypatch, {8: 1.2, 16: 4.0})
    choice = choose(bundle, cache=cache)
    assert (choice.method, choice.window) == ("ar", 1)
    assert "no candidate is worth exploring" in choice.reason and "scd-mc@8" in choice.reason
    monkeypatch.setattr(prior, "WORST_CASE", 1.2)
    assert choose(bundle, cache=cache).window == 16


def test_the_measurement_is_exploited_after_the_exploration(cheap, monkeypatch):
    bundle, cache = cheap
    comparable(monkeypatch, {8: 2.0})
    learned.record(bundle.model, LENGTH, bundle.defaults, "scd-mc@8", [100, 110, 120])
    good = choose(bundle, cache=cache)  # 110 x 11.3 ms = 1.243 s against ar's 2.883 s: 2.3x, by the margin
    assert (good.method, good.window, good.seconds) == ("scd-mc", 8, pytest.approx(1.243))
    assert "measured here over 3 image(s), spread 10.0" in good.reason
    assert good.steps["scd-mc@8"] == {"nfe": 110, "source": "measured", "images": 3, "spread": 10, "note": ""}


def test_a_disappointing_exploration_lowers_the_prior_of_its_window(cheap, monkeypatch):
    """scd-mc@8 measured at 268 forwards (1.01x fewer): slower than ar, and now the lowest figure at
    window 8 for this layout, so scd-gs@8 and sjd-pac@8 are not explored after it."""
    bundle, cache = cheap
    comparable(monkeypatch, {8: 2.0})
    learned.record(bundle.model, LENGTH, bundle.defaults, "scd-mc@8", [268])
    choice = choose(bundle, cache=cache)
    assert (choice.method, choice.window) == ("ar", 1)
    assert choice.steps["scd-gs@8"]["nfe"] == pytest.approx(268) and "learned" in choice.steps["scd-gs@8"]["note"]


def test_a_table_beats_the_prior_and_a_measurement_beats_the_table(cheap, monkeypatch, tmp_path):
    from .test_auto import write_table

    bundle, cache = cheap
    write_table(tmp_path / "cache" / "steps", bundle, {"scd-mc@8": 200})
    assert auto.forwards(bundle.model, bundle.layout, bundle.defaults, [("scd-mc", 8)])[0]["scd-mc@8"].source == "table"
    learned.record(bundle.model, LENGTH, bundle.defaults, "scd-mc@8", [90])
    steps = auto.forwards(bundle.model, bundle.layout, bundle.defaults, [("scd-mc", 8)])[0]["scd-mc@8"]
    assert (steps.source, steps.nfe, steps.images) == ("measured", 90, 1)


def test_the_prior_takes_the_lowest_at_the_window_of_a_comparable_layout(monkeypatch):
    rows = [
        ("a.json", 300, {"scd-gs@16": 100, "sjd-pac@16": 150, "ar@1": 300}),  # 3.0x and 2.0x
        ("b.json", 4096, {"scd-gs@16": 4096 / 1.1}),  # 1.1x, but 15x longer: not comparable
    ]
    monkeypatch.setattr(prior, "every_figure", lambda: rows)
    monkeypatch.setattr(learned, "everything", lambda: [])
    c, note = prior.expected_compression(272, 16)
    assert c == pytest.approx(2.0) and "a.json" in note
    assert prior.expected_compression(272, 64) == (prior.PUBLISHED, prior.PUBLISHED_NOTE)
    assert "published" in prior.PUBLISHED_NOTE


# --- the recording -----------------------------------------------------------------------------------


def test_figures_merge_counts_means_and_spread_exactly():
    f = Figure(0, 0.0).add([100, 110]).add([120])
    assert (f.images, f.nfe, f.low, f.high) == (3, 110, 100, 120)
    assert f.spread == pytest.approx(10.0)
    assert Figure(0, 0.0).add([7]).spread == 0


def test_a_record_is_keyed_by_weights_dtype_length_and_sampling(tmp_path, monkeypatch):
    monkeypatch.setenv("JACOBIGEN_CACHE", str(tmp_path))
    model = random_bundle().model
    sampling = {"cfg": 3.0, "top_k": 200}
    learned.record(model, 272, sampling, "scd-mc@16", [80, 90])
    learned.record(model, 272, sampling, "scd-mc@16", [100])
    key = learned.model_key(model, 272, sampling)
    assert key.split(" | ")[1:] == ["float32", "length=272", sampling_key(sampling)]
    assert learned.figures(model, 272, sampling)["scd-mc@16"].images == 3
    assert learned.figures(model, 272, {**sampling, "temperature": 0.5}) == {}
    assert learned.figures(model, 300, sampling) == {}
    assert learned.figures(copy.deepcopy(model).to(torch.bfloat16), 272, sampling) == {}
    assert learned.figures(random_bundle(seed=1).model, 272, sampling) == {}
    row = json.loads(learned.learned_file().read_text())["models"][key]["figures"]["scd-mc@16"]
    assert row == {"images": 3, "nfe": 90.0, "m2": 200.0, "min": 80.0, "max": 100.0}


def test_every_lossless_decode_records_its_forwards_per_image(tmp_path, monkeypatch):
    monkeypatch.setenv("JACOBIGEN_CACHE", str(tmp_path))
    bundle = random_bundle()
    gen, _ = bundle.generate([bundle.example_prompts[0]], method="scd-mc", window=8, seed=[0, 1])
    sampling = {k: v for k, v in bundle.defaults.items()}
    fig = learned.figures(bundle.model, LENGTH, sampling)["scd-mc@8"]
    assert fig.images == 2 and fig.nfe == pytest.approx(sum(gen.stats.sequence_nfe) / 2)
    bundle.generate([bundle.example_prompts[0]], method="pjd", window=8, seed=0)  # lossy: not a figure
    bundle.generate([bundle.example_prompts[0]], method="scd-mc", window=8, seed=0, alpha=0.5)  # options
    assert set(learned.figures(bundle.model, LENGTH, sampling)) == {"scd-mc@8"}
    assert learned.figures(bundle.model, LENGTH, sampling)["scd-mc@8"].images == 2


def test_a_broken_learned_file_warns_and_is_rewritten(tmp_path, monkeypatch):
    monkeypatch.setenv("JACOBIGEN_CACHE", str(tmp_path))
    learned.learned_file().write_text('{"format": "jacobigen-learned-steps", "version": 1, "models": 3}')
    model = random_bundle().model
    with pytest.warns(UserWarning, match="ignored and rewritten"):
        assert learned.figures(model, 272, {}) == {}
    learned.record(model, 272, {}, "ar@1", [272])
    assert learned.figures(model, 272, {})["ar@1"].images == 1


# --- the default on family checkpoints, in --stats ---------------------------------------------------


@pytest.mark.parametrize("family", ["chameleon", "janus"])
def test_stats_show_the_choice_its_reason_and_the_learned_table(family, tmp_path, monkeypatch):
    from tests.helpers import family_models as fm

    monkeypatch.setenv("JACOBIGEN_CACHE", str(tmp_path / "cache"))
    hf, tok = getattr(fm, family)()
    hf.save_pretrained(tmp_path / "ck")
    tok.save_pretrained(tmp_path / "ck")
    spec = f"{family}:{tmp_path / 'ck'}" + ("?size=64" if family == "chameleon" else "")
    stats = tmp_path / "s.json"
    for n in (2, 1):  # a few images, in two runs: the second reads what the first learned
        args = ["generate", "a red fox", "--model", spec, "--num-images", str(n), "--no-progress"]
        res = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "o.png"), "--stats", str(stats)])
        assert res.exit_code == 0, res.output
    record = json.loads(stats.read_text())
    chosen = f"{record['method']}@{record['window']}"
    assert record["auto"]["reason"] and record["auto"]["forwards"][chosen]["source"] in auto.SOURCES
    table = record["auto"]["learned"]
    assert chosen in table and sum(f["images"] for f in table.values()) == 3
    assert all(math.isfinite(f["nfe"]) and f["spread"] >= 0 for f in table.values())


def test_a_remembered_run_of_a_pair_auto_does_not_weigh_is_no_error(cheap, monkeypatch):
    """`generate --method vp+pac` (window auto) remembers vp+pac@16's seconds; the default's next choice
    read that record and failed with KeyError 'vp+pac@16' (found by tests/cli/test_outputs_and_options.py)."""
    bundle, cache = cheap
    comparable(monkeypatch, {8: 1.2})
    record = json.loads(cache.read_text())["records"]
    key, rec = next(iter(record.items()))
    rec["measured"][f"vp+pac@16|{sampling_key(bundle.defaults)}"] = 1.0
    auto.calibration.save(cache, key, rec)
    choice = choose(bundle, cache=cache)
    assert (choice.method, choice.window) == ("ar", 1) and "vp+pac@16" not in choice.steps


def test_int8_weights_learn_apart_from_their_float_ones(tmp_path, monkeypatch):
    from jacobigen.core.quantize import quantize_model

    pytest.importorskip("torchao")
    model = random_bundle().model
    plain = learned.model_key(model, 272, {})
    quantize_model(model, "int8")
    assert learned.model_key(model, 272, {}) == plain.replace(" | float32 | ", " | float32+int8 | ")


def test_the_cli_explores_then_exploits_what_it_learned(cheap, monkeypatch, tmp_path):
    """Through `generate` with no method, on the cheap machine: the first run explores scd-mc@8 (its
    prior 2x), records its forwards, and the next run weighs scd-mc@8 by that measured figure (it may
    explore a sibling next, whose prior the measurement does not raise)."""
    bundle, cache = cheap
    comparable(monkeypatch, {8: 2.0})
    args = [
        "generate",
        bundle.example_prompts[0],
        "--model",
        "random",
        "--no-progress",
        "--out",
        str(tmp_path / "a.png"),
    ]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0 and "auto: scd-mc at window 8 (exploring scd-mc@8" in first.output, first.output
    fig = learned.figures(bundle.model, LENGTH, bundle.defaults)["scd-mc@8"]
    second = CliRunner().invoke(main, [*args, "--stats", str(tmp_path / "s.json")])
    assert second.exit_code == 0, second.output
    forwards = json.loads((tmp_path / "s.json").read_text())["auto"]["forwards"]["scd-mc@8"]
    assert forwards["source"] == "measured" and forwards["nfe"] == fig.nfe and forwards["images"] == 1
    assert "exploring scd-mc@8" not in second.output  # measured now: never explored twice
