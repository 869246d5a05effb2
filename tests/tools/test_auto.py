"""`--method auto`: forward passes from the model's step table, costs measured here in a few forwards,
`ar` unless a candidate is predicted MARGIN times as fast; every figure below is set by the test, so
each expected choice and time is worked out by hand, not by the code under test."""

import contextlib
import json

import pytest

from jacobigen import ConfigError
from jacobigen.decode import auto, calibration, prior, steps
from jacobigen.decode.methods import get_method
from jacobigen.models import random_bundle
from jacobigen.tools.auto import choose, model_rows
from jacobigen.tools.steps import write_table as write_steps

LENGTH = 272  # the random model's image: 16 x 17 tokens


def test_candidates_are_lossless_and_include_ar():
    pairs = auto.candidates()
    assert ("ar", 1) in pairs and {m for m, _ in pairs} == {"ar", *auto.METHODS}
    assert all(get_method(m).lossless for m, _ in pairs)
    assert auto.candidates("auto", 16) == [("ar", 1)] + [(m, 16) for m in auto.METHODS]
    assert auto.candidates("scd-mc") == [("scd-mc", w) for w in auto.WINDOWS]
    assert auto.candidates("ar") == [("ar", 1)]
    with pytest.raises(ConfigError):
        auto.candidates("sjd-pac[tree_budget=full]", 4)  # a full tree fits no window of 4


def write_table(folder, bundle, nfe: dict[str, float], sampling: dict | None = None):
    """A step table for ``bundle`` in ``folder`` with the given forwards per image (ar: LENGTH)."""
    rows = {k: {"nfe": v, "tokens_per_iteration": LENGTH / v, "images": 2} for k, v in {"ar@1": LENGTH, **nfe}.items()}
    folder.mkdir(parents=True, exist_ok=True)
    write_steps(folder / "t.json", bundle, rows, sampling or bundle.defaults, {"by": "test"})


def seed_record(cache, bundle, curve: dict[int, float], bookkeeping: dict[str, float], measured=None):
    """The calibration record a choice on ``bundle``'s first example prompt reads."""
    model, rows = model_rows(bundle, bundle.defaults)
    key = auto.record_key(model, bundle.layout, rows, bundle.defaults)
    record = {"used": 1.0, "curve": {str(k): v for k, v in curve.items()}, "bookkeeping": bookkeeping}
    calibration.save(cache, key, {**record, "measured": measured or {}})


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """The random model, a cache folder of its own, and a machine where a block of n tokens costs
    10 ms + 1 ms x n and every iteration 1 ms of bookkeeping."""
    monkeypatch.setenv("JACOBIGEN_CACHE", str(tmp_path / "cache"))
    bundle = random_bundle()
    curve = {n: 0.010 + 0.001 * n for n in (1, 8, 16, 32, 64)}
    kept = {auto.label(m, w): 0.001 for m, w in auto.candidates()}
    return bundle, calibration.cache_file(), curve, kept


def test_the_fewest_forwards_times_their_cost_wins_by_the_margin(machine, tmp_path):
    bundle, cache, curve, kept = machine
    write_table(tmp_path / "cache" / "steps", bundle, {"scd-mc@16": 50, "scd-mc@64": 30, "scd-gs@8": 100})
    seed_record(cache, bundle, curve, kept)
    choice = choose(bundle, cache=cache)
    # ar: 272 x (11 ms + 1 ms) = 3.264 s; scd-mc@16: 50 x (26 + 1) ms = 1.35 s; @64: 30 x 75 ms = 2.25 s
    assert (choice.method, choice.window) == ("scd-mc", 16) and not choice.calibrated
    assert choice.seconds == pytest.approx(1.35) and choice.ar_seconds == pytest.approx(3.264)
    assert choice.speedup == pytest.approx(3.264 / 1.35)
    assert choice.predicted["scd-gs@8"] == pytest.approx(100 * 0.019)
    assert choice.steps["sjd-pac@32"]["source"] == "prior"  # not in the table: known only by the prior


def test_a_gain_within_the_margin_runs_ar(machine, tmp_path):
    bundle, cache, curve, kept = machine
    # scd-mc@8: 180 x (18 + 1) ms = 3.42 s > ar's 3.264 s; scd-gs@8: 162 x 19 ms = 3.078 s, 1.06x: noise
    write_table(tmp_path / "cache" / "steps", bundle, {"scd-mc@8": 180, "scd-gs@8": 162})
    seed_record(cache, bundle, curve, kept)
    choice = choose(bundle, cache=cache)
    assert (choice.method, choice.window) == ("ar", 1) and choice.speedup == 1.0
    assert "1.1x" in choice.reason and "1.06x" in choice.reason


def test_a_measurement_beats_the_prediction(machine, tmp_path):
    bundle, cache, curve, kept = machine
    write_table(tmp_path / "cache" / "steps", bundle, {"scd-mc@16": 50, "scd-gs@16": 60})
    skey = steps.sampling_key(bundle.defaults)
    # predicted 1.35 s, but measured 4 s: slower than ar's 3.264 s, so dropped; scd-gs@16 (60 x 27 ms) runs
    seed_record(cache, bundle, curve, kept, {f"scd-mc@16|{skey}": 4.0})
    choice = choose(bundle, cache=cache)
    assert (choice.method, choice.window) == ("scd-gs", 16)
    assert choice.seconds == pytest.approx(1.62) and choice.measured == {"scd-mc@16": 4.0}
    auto.remember(choice, 5.0, cache)  # scd-gs@16 measured slower than ar too: ar runs
    assert (choose(bundle, cache=cache).method, choose(bundle, cache=cache).window) == ("ar", 1)


def test_a_model_without_a_figure_runs_ar_when_no_worst_case_is_within_bounds(machine, monkeypatch):
    """The fixture's machine: a window of 8 costs (18 + 1) ms an iteration against ar's 12 ms, 1.58x at
    one token per iteration: nothing is explored, nothing decoded; a named method takes the window its
    prior predicts fastest (comparable figures set here: 2x fewer forwards at window 8, 4x beyond)."""
    bundle, cache, curve, kept = machine
    seed_record(cache, bundle, curve, kept)
    comparable = [("t.json", LENGTH, {"x@8": LENGTH / 2, "x@16": LENGTH / 4, "x@32": LENGTH / 4, "x@64": LENGTH / 4})]
    monkeypatch.setattr(prior, "every_figure", lambda: comparable)

    def no_decoding(*a, **k):
        raise AssertionError("auto decoded without a step table")

    monkeypatch.setattr(auto, "_probe", no_decoding)
    monkeypatch.setattr(type(bundle), "generate", no_decoding)
    choice = choose(bundle, cache=cache)
    assert (choice.method, choice.window, choice.table) == ("ar", 1, None)
    assert "no candidate is worth exploring" in choice.reason and "1.58x" in choice.reason
    # scd-mc: @8 136 x 19 ms = 2.58 s, @16 68 x 27 ms = 1.84 s, @32 68 x 43 ms = 2.92 s, @64 68 x 75 ms = 5.1 s
    named = choose(bundle, "scd-mc", cache=cache)
    assert (named.method, named.window) == ("scd-mc", 16) and named.seconds == pytest.approx(1.836)
    assert "by the prior" in named.reason and "t.json" in named.reason


def test_a_table_of_other_weights_or_sampling_does_not_apply(machine, tmp_path):
    bundle, cache, *_ = machine
    write_table(tmp_path / "cache" / "steps", random_bundle(seed=1), {"scd-mc@16": 50})
    write_table(tmp_path / "cache" / "steps2", bundle, {"scd-mc@16": 50}, {"temperature": 0.5})
    assert steps.find_steps(bundle.model, LENGTH, bundle.defaults) is None
    assert choose(bundle, cache=cache).table is None


@pytest.mark.parametrize("nfe", [1e-300, 0.5, LENGTH + 2, 1e300])
def test_a_table_with_impossible_forwards_is_skipped(machine, tmp_path, nfe):
    """At least one forward per image, at most one per token and the prefill: nfe 1e-300 once printed a
    300-digit speedup."""
    bundle, cache, curve, kept = machine
    write_table(tmp_path / "cache" / "steps", bundle, {"scd-mc@16": nfe})
    with pytest.warns(UserWarning, match=r"scd-mc@16.nfe must be a number from 1 to 273"):
        assert steps.find_steps(bundle.model, LENGTH, bundle.defaults) is None
    seed_record(cache, bundle, curve, kept)  # no worst case within bounds: nothing to explore
    choice = choose(bundle, cache=cache)
    assert (choice.method, choice.table) == ("ar", None)


def test_measurement_takes_seconds_and_then_nothing(machine, tmp_path):
    """First choice: a few forwards and probe iterations, not pilot images; the second reads the cache."""
    bundle, cache, *_ = machine
    write_table(tmp_path / "cache" / "steps", bundle, {f"{m}@{w}": 40 for m, w in auto.candidates() if m != "ar"})
    first = choose(bundle, cache=cache)
    assert first.calibrated and first.table is not None
    record = next(iter(json.loads(cache.read_text())["records"].values()))
    assert set(map(int, record["curve"])) == {1, *auto.WINDOWS} and "ar@1" in record["bookkeeping"]
    second = choose(bundle, cache=cache)
    assert not second.calibrated and (second.method, second.window) == (first.method, first.window)


def test_an_unwritable_cache_warns_and_still_chooses(machine, tmp_path):
    bundle = machine[0]
    write_table(tmp_path / "cache" / "steps", bundle, {"scd-mc@16": 50})  # a table: costs are measured
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.warns(UserWarning, match="calibration not kept"):
        choice = choose(bundle, "auto", cache=blocker / "calibration.json")
    assert choice.calibrated and choice.table is not None


def test_a_measured_choice_stays_unless_another_is_clearly_faster(machine, tmp_path):
    """Two pairs of equal forwards: the one measured here stays against a prediction within the margin."""
    bundle, cache, curve, kept = machine
    write_table(tmp_path / "cache" / "steps", bundle, {"scd-mc@8": 100, "sjd-pac@8": 100})
    kept = {**kept, "scd-mc@8": 0.002}  # predicted: scd-mc@8 100 x 20 ms = 2.0 s, sjd-pac@8 100 x 19 ms = 1.9 s
    seed_record(cache, bundle, curve, kept)
    assert (choose(bundle, cache=cache).method, choose(bundle, cache=cache).window) == ("sjd-pac", 8)
    skey = steps.sampling_key(bundle.defaults)
    seed_record(cache, bundle, curve, kept, {f"scd-mc@8|{skey}": 2.05})  # 2.05 s < 1.1 x 1.9 s: stays
    stays = choose(bundle, cache=cache)
    assert (stays.method, stays.window, stays.seconds) == ("scd-mc", 8, 2.05) and stays.reason.startswith("measured")
    seed_record(cache, bundle, curve, kept, {f"scd-mc@8|{skey}": 2.2})  # 2.2 s > 1.1 x 1.9 s: replaced
    assert choose(bundle, cache=cache).method == "sjd-pac"


@contextlib.contextmanager
def slots_asked(model, into: list):
    """Records the slots per row of every cache ``model`` makes meanwhile."""
    real = model.new_cache
    model.new_cache = lambda rows, slots: into.append(slots) or real(rows, slots)
    try:
        yield
    finally:
        del model.new_cache


def test_forwards_are_timed_in_the_cache_the_decode_allocates(machine, tmp_path, monkeypatch):
    """Attention reads every cache slot: a block timed in a cache just long enough costs less than in
    the decode's, so each size is timed at the slots a decode with that block allocates."""
    bundle, cache, *_ = machine
    write_table(tmp_path / "cache" / "steps", bundle, {"scd-mc@16": 50})
    timed: list[int] = []
    curve = auto.forward_cost_curve

    def timing(model, *args):
        with slots_asked(model, timed):
            return curve(model, *args)

    monkeypatch.setattr(auto, "forward_cost_curve", timing)
    choose(bundle, cache=cache)
    for method, window in [("ar", None), ("scd-mc", 16)]:
        decoded: list[int] = []
        with slots_asked(bundle.model, decoded):
            bundle.generate([bundle.example_prompts[0]], method=method, window=window)
        assert max(decoded) in timed  # the decode's cache (the largest it makes)


@pytest.mark.parametrize("spec", ["emoji-names", "emoji"])
def test_a_shipped_table_reaches_the_model_in_either_dtype(spec):
    """The embedded models load in bfloat16 on a CPU with native bf16 and in float32 elsewhere: the
    shipped table must reach both (a checksum of the unrounded weights differed in its 4th digit on
    emoji-names, so its bfloat16 default found no table and ran ar)."""
    from jacobigen.models import load_bundle

    found = []
    for dtype in ("float32", "bfloat16"):
        bundle = load_bundle(spec, "cpu", dtype=dtype)
        hit = steps.find_steps(bundle.model, bundle.layout.length, bundle.defaults)
        assert hit is not None, f"{spec} in {dtype}: no shipped table"
        found.append(hit)
    assert found[0] == found[1]
