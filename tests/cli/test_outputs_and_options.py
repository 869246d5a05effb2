"""Issue 39: outputs never destroy what is at their path, options never silently lose, and the
Python API and model specs answer bad input with our errors, naming the argument. (The command
line's refusals are rows of tests/cli/test_bad_inputs.py; batch invariance is tests/decode/test_batch_invariance.py.)"""

import errno
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from jacobigen import ConfigError, WeightsError, generate
from jacobigen.cli import main
from jacobigen.core.checks import integer
from jacobigen.core.errors import OutputError
from jacobigen.core.layout import ImageLayout
from jacobigen.decode.methods import METHODS, get_method
from jacobigen.models import load_bundle
from jacobigen.models.embedded import WordCaptions
from jacobigen.models.families import model_options
from jacobigen.tools import files
from jacobigen.tools.files import FolderLock, atomic_write, check_writable
from tests.helpers.models import LAYOUT, PROMPT, random_model

# --- the output writer --------------------------------------------------------------------------


def test_a_symlink_is_followed_and_kept(tmp_path):
    target = tmp_path / "real.png"
    target.write_bytes(b"old")
    (tmp_path / "link.png").symlink_to(target)
    atomic_write(tmp_path / "link.png", b"new")
    assert (tmp_path / "link.png").is_symlink() and target.read_bytes() == b"new"


def test_the_cli_writes_through_a_symlink(tmp_path):
    target = tmp_path / "real.png"
    (tmp_path / "link.png").symlink_to(target)
    res = CliRunner().invoke(main, ["generate", "heart", "--model", "random", "--out", str(tmp_path / "link.png")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "link.png").is_symlink() and target.read_bytes().startswith(b"\x89PNG")


def test_a_device_is_never_replaced(tmp_path):
    with pytest.raises(ConfigError, match="is a device"):
        atomic_write("/dev/null", b"{}", "--stats")
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")


def test_a_full_disk_is_reported_and_leaves_nothing(tmp_path, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    (tmp_path / "a.png").write_bytes(b"old")
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OutputError, match="cannot write --out .*No space left on device"):
        atomic_write(tmp_path / "a.png", b"new", "--out")
    assert (tmp_path / "a.png").read_bytes() == b"old" and len(list(tmp_path.iterdir())) == 1


def test_too_little_free_space_is_refused_before_work(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(1 << 30, 1 << 30, 1 << 20))
    with pytest.raises(OutputError, match="1 MiB free"):
        check_writable(tmp_path / "a.png", "--out")


def test_an_over_long_name_is_refused_before_work(tmp_path):
    with pytest.raises(ConfigError, match="shorten it"):
        check_writable(tmp_path / ("y" * 246 + ".png"), "--out")  # fits, but its temporary name does not


def test_two_outputs_of_one_run_may_not_share_a_file(tmp_path):
    (tmp_path / "link.json").symlink_to(tmp_path / "a.png")
    with pytest.raises(ConfigError, match="--out and --stats both write"):
        files.distinct({"--out": tmp_path / "a.png", "--stats": tmp_path / "link.json"})


def test_a_read_only_out_is_refused_unless_forced_and_keeps_its_mode(tmp_path):
    out = tmp_path / "keep.png"
    out.write_bytes(b"precious")
    out.chmod(0o444)
    res = CliRunner().invoke(main, ["generate", "heart", "--model", "random", "--out", str(out), "--no-progress"])
    assert res.exit_code == 2 and "read-only" in res.output and "--force" in res.output
    assert out.read_bytes() == b"precious"
    res = CliRunner().invoke(
        main, ["generate", "heart", "--model", "random", "--out", str(out), "--no-progress", "--force"]
    )
    assert res.exit_code == 0, res.output
    assert out.read_bytes()[:4] == b"\x89PNG" and (out.stat().st_mode & 0o777) == 0o444


def test_a_replaced_output_keeps_its_permissions(tmp_path):
    out = tmp_path / "shared.png"
    out.write_bytes(b"old")
    out.chmod(0o640)
    atomic_write(out, b"new")
    assert out.read_bytes() == b"new" and (out.stat().st_mode & 0o777) == 0o640


@pytest.mark.parametrize("name", ["00000.png", "00000.json", "stats.json", ".jacobigen.lock"])
def test_a_prompts_file_the_folder_run_would_overwrite_is_refused(tmp_path, name):
    folder = tmp_path / "od"
    folder.mkdir()
    prompts = folder / name
    prompts.write_text("a red heart\n")
    res = CliRunner().invoke(
        main, ["generate", "--model", "random", "--prompts", str(prompts), "--out-dir", str(folder), "--no-progress"]
    )
    assert res.exit_code == 2 and "name the run writes" in res.output, res.output
    assert prompts.read_text() == "a red heart\n" and sorted(p.name for p in folder.iterdir()) == [name]


def test_a_dry_run_of_a_folder_run_creates_nothing_and_says_what_it_would_do(tmp_path):
    (tmp_path / "p.txt").write_text("red heart\nblue car\n")
    out = tmp_path / "new" / "out"
    base = ["generate", "--prompts", str(tmp_path / "p.txt"), "--out-dir", str(out), "--dry-run", "--num-images", "3"]
    res = CliRunner().invoke(main, [*base, "--model", "random"])
    assert res.exit_code == 0 and "memory plan" in res.output, res.output
    assert f"dry run: 6 image(s) would go to {out}; nothing made" in res.output
    res = CliRunner().invoke(main, [*base, "--ray", "--method", "sjd", "--window", "8", "--workers", "3"])
    assert res.exit_code == 0 and "each of the 3 Ray worker(s) loads default on its own machine" in res.output, (
        res.output
    )
    assert "dry run: 6 image(s)" in res.output
    assert not (tmp_path / "new").exists()


def test_an_output_that_is_an_input_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="destroy the input"):
        files.distinct({"--out": tmp_path / "p.txt"}, inputs={"--prompts": tmp_path / "p.txt"})


def test_a_second_run_on_an_out_dir_stops_at_once(tmp_path):
    (tmp_path / "p.txt").write_text("red heart\n")
    out = tmp_path / "out"
    out.mkdir()
    with FolderLock(out):
        res = CliRunner().invoke(
            main, ["generate", "--prompts", str(tmp_path / "p.txt"), "--model", "random", "--out-dir", str(out)]
        )
    assert res.exit_code == 1 and f"another jacobigen run (pid {os.getpid()}) is writing to" in res.output
    assert not list(out.glob("*.png"))
    with FolderLock(out):  # released when the run ended
        pass


# --- options ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,name,spelling",
    [
        ("vp+pac", "sjd+pac+vp", "sjd+pac+vp"),
        ("pac+vp", "sjd+pac+vp", "sjd+pac+vp"),
        ("vp+pac+scd-mc", "scd-mc+pac+vp", "scd-mc+pac+vp"),
        ("pac+scd-mc", "sjd-pac", "scd-mc+pac"),
        ("vp", "sjd-vp", "sjd+vp"),
        ("vp+lantern", "lantern+vp", "sjd+lantern+vp"),
        ("scd-mc+pjd", "pjd+scd-mc", "pjd+scd-mc"),
    ],
)
def test_a_method_string_has_one_meaning_in_any_order(text, name, spelling):
    m = get_method(text)
    assert (m.name, m.parts_text) == (name, spelling)


def test_every_preset_is_its_own_spelling_or_named_for_it():
    for name, m in METHODS.items():
        assert get_method(m.parts_text).parts == m.parts, name


def test_the_stats_line_names_the_parts_that_ran(tmp_path):
    res = CliRunner().invoke(
        main, ["generate", "heart", "--model", "random", "--method", "vp+pac", "--out", str(tmp_path / "a.png")]
    )
    assert res.exit_code == 0, res.output
    assert "method: sjd+pac+vp (lossless)" in res.output


def test_a_png_sheet_records_what_made_it(tmp_path):
    """samples.png's freshness check (tests/test_docs.py) reads this record; a JPEG carries none."""
    from PIL import Image

    args = ["generate", "heart", "sun", "--model", "random", "--method", "sjd", "--window", "4", "--seed", "3"]
    res = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "a.png")])
    assert res.exit_code == 0, res.output
    made = json.loads(Image.open(tmp_path / "a.png").text["jacobigen"])
    assert made["prompts"] == ["heart", "sun"] and made["seeds"] == [3, 4] and made["method"] == "sjd"
    assert made["model"] == "random" and {"git_commit", "git_dirty"} <= made.keys()
    res = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "a.jpg")])
    assert res.exit_code == 0 and "jacobigen" not in Image.open(tmp_path / "a.jpg").info, res.output


def test_a_window_the_method_never_reads_is_refused(tmp_path):
    out = tmp_path / "a.png"
    res = CliRunner().invoke(main, ["generate", "heart", "--model", "random", "--method", "ar", "--window", "16"])
    assert res.exit_code == 2 and "ar always runs window 1: --window 16 would be ignored" in res.output, res.output
    res = CliRunner().invoke(main, ["generate", "heart", "--model", "random", "--method", "ar", "--out", str(out)])
    assert res.exit_code == 0 and "window 1" in res.output, res.output


def test_method_options_need_a_named_window():
    """--window auto calibrates without -o options, so they are refused rather than calibrated past."""
    res = CliRunner().invoke(
        main, ["generate", "heart", "--model", "random", "--method", "sjd-pac", "-o", "tree_budget=full"]
    )
    assert res.exit_code == 2 and "--window auto calibrates sjd-pac without method options" in res.output


def test_an_empty_prompt_warns(tmp_path):
    res = CliRunner().invoke(main, ["generate", " ", "--model", "random", "--out", str(tmp_path / "a.png")])
    assert res.exit_code == 0 and "warning: prompt ' ': the random model conditions on no text" in res.output


def test_threads_above_the_cores_warn(tmp_path):
    cores = len(os.sched_getaffinity(0))
    res = CliRunner().invoke(
        main,
        [
            "generate",
            "heart",
            "--model",
            "random",
            "--method",
            "ar",
            "--threads",
            str(cores + 1),
            "--out",
            str(tmp_path / "a.png"),
        ],
    )
    assert res.exit_code == 0 and f"is more than the {cores} core(s) here" in res.output


@pytest.mark.parametrize(
    "args,says",
    [
        (["bench", "--methods", ""], "give at least one method"),
        (["bench", "--methods", " , "], "give at least one method"),
        (["bench", "--window", ""], "give at least one value"),
        (["throughput", "--batch", ""], "give at least one value"),
        (["throughput", "--methods", ","], "give at least one value"),
    ],
)
def test_an_empty_list_is_refused(args, says):
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2 and says in res.output, res.output


# --- the Python API and model specs ---------------------------------------------------------------

MODEL = random_model()


def _generate(**kw):
    return lambda: generate(MODEL, kw.pop("prompt", PROMPT), **{"layout": LAYOUT, **kw})


def _pipe_words(tmp_path, text):
    path = tmp_path / "words.json"
    path.write_text(text)
    return lambda: WordCaptions.load(path)


API = [
    ("layout None", _generate(layout=None), ConfigError, "layout must be a jacobigen ImageLayout"),
    ("layout as text", _generate(layout="16x16"), ConfigError, "got str"),
    ("method None", _generate(method=None), ConfigError, "method must be a preset"),
    ("method an int", _generate(method=3), ConfigError, "got 3"),
    ("method empty", _generate(method=""), ConfigError, "method must be a preset"),
    ("seed an empty list", _generate(seed=[]), ConfigError, "seed is an empty list"),
    ("progress as text", _generate(progress="yes"), ConfigError, "progress must be True or False"),
    ("timing an int", _generate(timing=2), ConfigError, "timing must be True or False"),
    ("deterministic as text", _generate(deterministic="no"), ConfigError, "deterministic must be True"),
    ("batch_invariant renamed", _generate(batch_invariant=True), ConfigError, "replaced by deterministic"),
    ("latents as text", _generate(method="gsd", latents="x"), ConfigError, "latents must be a 2-D tensor"),
    ("cfg None", _generate(cfg=None), ConfigError, "cfg scale must be a finite number, got None"),
    (
        "layout ids past the vocabulary",
        _generate(layout=ImageLayout(4, 4, (0, 10**6))),
        ConfigError,
        "exceed the model vocabulary (4099)",
    ),
    (
        "an end-of-line id past the vocabulary",
        _generate(layout=ImageLayout(4, 4, (0, 100), eol_id=10**6)),
        ConfigError,
        "eol_id=1000000 lies outside the model vocabulary",
    ),
    (
        "a header id past the vocabulary",
        _generate(layout=ImageLayout(4, 4, (0, 100), header=(5000,))),
        ConfigError,
        "header[0]=5000 lies outside",
    ),
    (
        "an image longer than the context",
        _generate(layout=ImageLayout(10**5, 10**5, (0, 100))),
        ConfigError,
        "do not fit the model's context of 320",
    ),
    ("layout rows as text", lambda: ImageLayout("4", 4, (0, 100)), ConfigError, "layout rows must be an int"),
    ("layout ids None", lambda: ImageLayout(4, 4, None), ConfigError, "a (first, end) pair of ints"),
    ("layout header negative", lambda: ImageLayout(4, 4, (0, 9), header=(-1,)), ConfigError, "header must hold"),
    ("layout eol as text", lambda: ImageLayout(4, 4, (0, 9), eol_id="9"), ConfigError, "eol_id must be an int"),
    ("a count as text", lambda: integer("n", "x"), ConfigError, "n must be an integer, got 'x'"),
    ("a seed as a fraction", _generate(seed=[1.5]), ConfigError, "seed must be an integer in [0, 4294967295]"),
    ("model spec None", lambda: load_bundle(None), ConfigError, "model must be a spec string"),
    ("model spec an int", lambda: load_bundle(5), ConfigError, "got 5"),
    ("size not a number", lambda: model_options("emu3", "size=abc", {"size"}), ConfigError, "whole number"),
    ("size negative", lambda: model_options("emu3", "size=-8", {"size"}), ConfigError, "whole number"),
    ("size 0", lambda: model_options("chameleon", "size=0", {"size"}), ConfigError, "in [16, 8192]"),
    ("size huge", lambda: model_options("emu3", "size=" + "9" * 20, {"size"}), ConfigError, "whole number"),
    ("size a fraction", lambda: model_options("emu3", "size=7.5", {"size"}), ConfigError, "whole number"),
    ("size in other digits", lambda: model_options("emu3", "size=²", {"size"}), ConfigError, "whole number"),
    ("size given twice", lambda: model_options("emu3", "size=64&size=128", {"size"}), ConfigError, "given twice"),
    ("size off the grid", lambda: model_options("llamagen", "size=250", {"size"}), ConfigError, "multiples of 16"),
    ("an unknown spec key", lambda: model_options("emu3", "colour=red", {"size"}), ConfigError, "unknown model option"),
    ("size a family fixes", lambda: model_options("janus", "size=384", set()), ConfigError, "janus takes no size"),
]


@pytest.mark.parametrize("what,call,error,says", API, ids=[a[0] for a in API])
def test_the_api_names_the_bad_argument(what, call, error, says):
    with pytest.raises(error) as info:
        call()
    assert says in str(info.value)


@pytest.mark.parametrize("text", ["null", "[]", "{}", "not json", '{"words": null}', '{"words": [1, 2]}'])
def test_a_junk_words_file_is_a_weights_error(tmp_path, text):
    with pytest.raises(WeightsError, match="words"):
        _pipe_words(tmp_path, text)()


def test_a_good_size_is_kept():
    assert model_options("emu3", "size=256", {"size"}) == {"size": 256}


def test_tokens_are_unchanged_by_the_checks():
    """The checks only refuse: a good call decodes as before (same seed, same tokens)."""
    a = generate(MODEL, PROMPT, layout=LAYOUT, method="vp+pac", window=8, seed=3)
    b = generate(MODEL, PROMPT, layout=LAYOUT, method="pac+vp", window=8, seed=3)
    assert torch.equal(a.tokens, b.tokens) and a.method.name == b.method.name == "sjd+pac+vp"


AS_LIMIT = 3 << 29  # 1.5 GiB of address space: torch imports in ~0.6, a batch of 200 images' caches needs ~5
SRC = Path(__file__).parents[2] / "src"


@pytest.mark.parametrize(
    "limit, says",
    [
        (AS_LIMIT, "Error: out of memory (torch could not get "),  # a plain RuntimeError from its CPU allocator
        (300 << 20, "Error: out of memory while loading a library ("),  # libtorch_cpu.so cannot be mapped
    ],
    ids=["allocating", "importing-torch"],
)
def test_out_of_memory_under_a_limit_is_one_line(tmp_path, limit, says):
    """Under ``ulimit -v``, torch fails in ways Python does not call MemoryError: each is told as out
    of memory, one line with exit code 1, and nothing is written."""

    def set_limit():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    out = tmp_path / "a.png"
    args = ["generate", "red heart", "--method", "sjd", "--window", "8", "--batch-size", "200", "--num-images", "200"]
    args += ["--dtype", "float32"]  # the caches' size this limit is set for, on any CPU
    path = os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))
    res = subprocess.run(
        [sys.executable, "-m", "jacobigen.cli", *args, "--out", str(out), "--no-progress"],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path},
        timeout=180,
        preexec_fn=set_limit,
    )
    assert res.returncode == 1 and res.stderr.startswith(says), res.stderr
    assert res.stderr.count("\n") == 1 and "unexpected" not in res.stderr and not out.exists()
