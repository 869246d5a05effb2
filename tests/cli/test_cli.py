"""The command line as a user runs it."""

import json

import pytest
from click.testing import CliRunner
from PIL import Image

from jacobigen.cli import main


def test_generate_writes_png_and_reports(tmp_path):
    out, stats = tmp_path / "img.png", tmp_path / "stats.json"
    res = CliRunner().invoke(
        main,
        [
            "generate",
            "red heart",
            "--model",
            "random",
            "--method",
            "sjd",
            "--window",
            "8",
            "--num-images",
            "2",
            "--out",
            str(out),
            "--stats",
            str(stats),
            "--no-progress",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "random weights" in res.output and "step compression" in res.output
    assert Image.open(out).size == (2 * 256, 256)
    data = json.loads(stats.read_text())
    assert data["method"] == "sjd" and data["batch"] == 2 and data["nfe"] < data["ar_nfe"]


def test_methods_lists_presets():
    res = CliRunner().invoke(main, ["methods"])
    assert res.exit_code == 0 and "sjd" in res.output and "lossless" in res.output


def test_bad_input_is_a_message_not_a_traceback():
    res = CliRunner().invoke(main, ["generate", "x", "--model", "random", "--window", "0"])
    assert res.exit_code == 2 and "--window" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(main, ["generate", "x", "--model", "random", "-o", "nokey"])
    assert res.exit_code != 0 and "key=value" in res.output


def test_generate_with_the_reference_tree_reports_it(tmp_path):
    res = CliRunner().invoke(
        main,
        [
            "generate",
            "red heart",
            "--model",
            "random",
            "--method",
            "sjd-pac",
            "--window",
            "24",
            "-o",
            "tree_budget=full",
            "--no-progress",
            "--out",
            str(tmp_path / "t.png"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "tree: 24 nodes per forward" in res.output
    res = CliRunner().invoke(
        main,
        [
            "generate",
            "x",
            "--model",
            "random",
            "--method",
            "sjd-pac",
            "--window",
            "16",
            "-o",
            "tree_budget=full",
            "--out",
            str(tmp_path / "u.png"),
        ],
    )
    assert res.exit_code != 0 and "at least 21" in res.output and "Traceback" not in res.output


@pytest.mark.slow
def test_extreme_but_finite_settings_make_an_image(tmp_path):
    for flags in (["--cfg", "1e300"], ["--temperature", "1e-45"], ["--cfg", "-1e300", "--top-p", "1e-300"]):
        res = CliRunner().invoke(
            main,
            [
                "generate",
                "x",
                "--model",
                "random",
                "--window",
                "8",
                "--no-progress",
                "--out",
                str(tmp_path / "e.png"),
                *flags,
            ],
        )
        assert res.exit_code == 0, res.output


def test_an_overlong_prompt_is_warned_about(tmp_path):
    res = CliRunner().invoke(
        main,
        [
            "generate",
            "a" * 100_000,
            "--model",
            "random",
            "--method",
            "ar",
            "--no-progress",
            "--out",
            str(tmp_path / "long.png"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert (
        "warning: prompt 'aaaa" in res.output
        and "the random model reads only the first 48 of its 100000 bytes" in res.output
    )


def test_debug_shows_the_traceback():
    res = CliRunner().invoke(main, ["--debug", "generate", "x", "--method", "nope"])
    assert res.exit_code == 1 and type(res.exception).__name__ == "ConfigError"


def test_help_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys; from jacobigen.cli import main; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
