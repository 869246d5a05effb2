"""`--method auto`: the lossless (method, window) that runs fastest here, measured once per model and
machine and cached; `ar` when nothing beats it; the stats line says what was predicted and measured."""

import json

import pytest
from click.testing import CliRunner

from jacobigen import ConfigError
from jacobigen.cli import main
from jacobigen.decode.methods import get_method
from jacobigen.models import random_bundle
from jacobigen.tools import auto


def test_candidates_are_lossless_and_include_ar():
    pairs = auto.candidates()
    assert ("ar", 1) in pairs and {m for m, _ in pairs} == {"ar", *auto.METHODS}
    assert all(get_method(m).lossless for m, _ in pairs)
    assert auto.candidates("auto", 16) == [("ar", 1)] + [(m, 16) for m in auto.METHODS]
    assert auto.candidates("scd-mc") == [("scd-mc", w) for w in auto.WINDOWS]
    assert auto.candidates("ar") == [("ar", 1)]
    with pytest.raises(ConfigError):
        auto.candidates("sjd-pac[tree_budget=full]", 4)  # a full tree fits no window of 4


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    """The random model and one calibration of it (tests edit copies)."""
    bundle, cache = random_bundle(), tmp_path_factory.mktemp("auto") / "calibration.json"
    auto.choose(bundle, cache=cache)
    return bundle, cache.read_text()


def test_choice_is_measured_once_then_read_from_the_cache(tmp_path, calibrated):
    (bundle, text), cache = calibrated, tmp_path / "calibration.json"
    cache.write_text(text)
    first = auto.choose(bundle, cache=cache)
    assert not first.calibrated and (first.method, first.window) in auto.candidates()
    assert first.seconds == min(first.predicted[f"{m}@{w}"] for m, w in auto.candidates())
    assert first.ar_seconds == first.predicted["ar@1"] and first.speedup >= 1.0  # ar is a candidate
    (record,) = json.loads(cache.read_text()).values()
    assert set(record["pilots"]) == {f"{m}@{w}" for m, w in auto.candidates()}
    assert 1 in map(int, record["curve"])
    other = auto.choose(bundle, "ar", cache=cache, temperature=0.5)  # other sampling: another calibration
    assert other.calibrated and len(json.loads(cache.read_text())) == 2
    assert auto.choose(bundle, cache=cache) == first  # the first is still there


def test_ar_is_chosen_when_nothing_beats_it(tmp_path, calibrated):
    """A machine where every block costs its size in single-token forwards: no window pays."""
    (bundle, text), cache = calibrated, tmp_path / "calibration.json"
    store = json.loads(text)
    (key,) = store
    store[key]["curve"] = {str(s): 0.01 * s for s in map(int, store[key]["curve"])}
    for p in store[key]["pilots"].values():
        p["bookkeeping"] = 0.0
    cache.write_text(json.dumps(store))
    choice = auto.choose(bundle, cache=cache)
    assert not choice.calibrated and (choice.method, choice.window) == ("ar", 1) and choice.speedup == 1.0


def test_a_fast_wide_block_picks_a_jacobi_method(tmp_path, calibrated):
    """A machine where any block costs one forward (a GPU's regime): the fewest forwards win."""
    (bundle, text), cache = calibrated, tmp_path / "calibration.json"
    store = json.loads(text)
    (key,) = store
    store[key]["curve"] = {s: 0.01 for s in store[key]["curve"]}
    for p in store[key]["pilots"].values():
        p["bookkeeping"] = 0.0
    cache.write_text(json.dumps(store))
    choice = auto.choose(bundle, cache=cache)
    fewest = min(store[key]["pilots"].items(), key=lambda kv: kv[1]["nfe"])[0]
    assert choice.method != "ar" and f"{choice.method}@{choice.window}" == fewest


def test_an_unwritable_cache_warns_and_still_chooses(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.warns(UserWarning, match="calibration not kept"):
        choice = auto.choose(random_bundle(), "ar", cache=blocker / "calibration.json")
    assert choice.calibrated


def test_the_cli_default_is_auto_and_says_what_it_chose(tmp_path):
    out, stats = tmp_path / "a.png", tmp_path / "s.json"
    res = CliRunner().invoke(main, ["generate", "heart", "--model", "random", "--out", str(out), "--stats", str(stats)])
    assert res.exit_code == 0, res.output
    chosen = json.loads(stats.read_text())["method"]
    assert f"auto: {chosen} at window" in res.output
    assert "speed against ar: predicted" in res.output and "measured" in res.output
    base = ["generate", "heart", "--model", "random", "--out", str(out), "--method", "scd-mc"]
    window = CliRunner().invoke(main, base)  # the method named, its window auto
    assert window.exit_code == 0 and "auto: scd-mc at window" in window.output, window.output
    fixed = CliRunner().invoke(main, [*base, "--window", "16"])
    assert fixed.exit_code == 0 and "auto:" not in fixed.output and "speed against ar" not in fixed.output
