"""The benchmark harness end to end on a tiny model; its figures are computed, not copied (and
never asserted against a clock: timings depend on the machine)."""

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import jacobigen
from jacobigen.cli import main
from jacobigen.core.errors import JacobigenError
from jacobigen.models import WEIGHTS, random_bundle, weights_provenance
from jacobigen.tools.bench import run_bench, run_compiled_bench
from jacobigen.tools.bench_report import summary_markdown, write_reports
from jacobigen.tools.threads import SMALL_MODEL, choose_threads, environment_line, git_commit

MACHINE = {
    "threads",
    "omp_wait_policy",
    "torch",
    "device",
    "cpu",
    "loadavg_before",
    "loadavg_after",
    "git_commit",
    "git_dirty",
    "model_spec",
    "weights",
}  # every benchmark JSON records these


@pytest.mark.slow
def test_bench_cli_writes_outputs(tmp_path):
    res = CliRunner().invoke(
        main,
        [
            "bench",
            "--model",
            "random",
            "--methods",
            "sjd",
            "--window",
            "4,auto",
            "--prompts",
            "1",
            "--threads",
            "1",
            "--out",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "bench.json").read_text())
    names = [(r["method"], r["window"], r["auto"]) for r in data["rows"]]
    assert names == [
        ("ar", 1, False),
        ("plain-ar", 1, False),
        ("sjd", 4, False),
        ("sjd", data["auto"]["sjd"]["window"], True),
    ]
    assert data["cost_curve"]["1"] > 0
    for png in ["speedup.png", "tokens_per_iteration.png", "compression_vs_window.png", "cost_curve.png"]:
        assert (tmp_path / png).stat().st_size > 1000
    ar, plain = data["rows"][:2]
    assert ar["nfe"] == plain["nfe"] == 272 and ar["step_compression"] == plain["step_compression"] == 1.0
    assert plain["histogram"] == {"1": 271} and plain["overhead_share"] is None and ar["overhead_share"] > 0
    assert all(r["step_compression"] > 1 for r in data["rows"][2:])
    assert all(r["wall"] > 0 and r["cpu"] > 0 and r["runs"] == 1 for r in data["rows"])

    base = data["baseline"]
    fastest = min((ar, plain), key=lambda r: r["wall"])
    assert base["wall"] == fastest["method"] and fastest["latency_speedup"] == 1.0
    assert base["ar_over_plain_wall"] == pytest.approx(ar["wall"] / plain["wall"])
    for r in data["rows"]:
        assert r["latency_speedup"] == pytest.approx(fastest["wall"] / r["wall"])
        assert r["latency_speedup_vs_ar"] == pytest.approx(ar["wall"] / r["wall"])
        assert r["latency_speedup"] <= r["latency_speedup_vs_ar"] + 1e-12
    assert MACHINE <= set(data) and data["threads"] == 1 and data["warmup_seconds"] > 0
    assert data["model_spec"] == "random" and data["weights"] == "random:seed=0"
    md = (tmp_path / "bench.md").read_text()
    assert "| CPU-time speedup |" in md and "| sjd | 4 |" in md and "| plain-ar | 1 | yes | 272.0 |" in md
    assert md.startswith(environment_line(data)) and "ar takes" in md


def test_settings_side_by_side(tmp_path):
    """Several settings (thread counts, compiled): a folder each and one summary table."""
    rows, extra = run_bench(random_bundle(), ["sjd"], [4], ["red heart"], [0], progress=False, warmup=False)
    results = {
        "threads-1": (rows, extra),
        "threads-1-compiled": (
            rows,
            {**extra, "compile": {"mode": "torch.compile(model, dynamic=True)", "graphs": 2, "graph_breaks": 0}},
        ),
    }
    text = write_reports(results, tmp_path, {"model": "random"})
    assert (tmp_path / "bench.md").read_text() == text == summary_markdown(results)
    assert "| s/image (threads-1) | latency speedup (threads-1) | s/image (threads-1-compiled) |" in text
    assert "## threads-1-compiled" in text and "2 graph(s), 0 graph break(s)" in text
    for label in results:
        assert json.loads((tmp_path / label / "bench.json").read_text())["rows"][1]["method"] == "plain-ar"
    assert set(json.loads((tmp_path / "bench.json").read_text())["settings"]) == set(results)


def test_rows_are_named_records_and_a_repeated_row_runs_once():
    """run_bench keys rows by Config (method, window, auto), not by positional tuples: a window given
    twice is one row, timed once per (prompt, seed) (the tuple version timed it twice into one row)."""
    from jacobigen.tools.bench import Config, _fixed_configs

    rows, extra = run_bench(random_bundle(), ["sjd"], [4, 4], ["red heart"], [0], progress=False, warmup=False)
    assert [(r.method, r.window, r.runs) for r in rows] == [("ar", 1, 1), ("plain-ar", 1, 1), ("sjd", 4, 1)]
    assert extra["baseline"]["wall"] in ("ar", "plain-ar")
    from jacobigen.decode.methods import parse_variant

    specs = [parse_variant(m) for m in ("ar", "sjd-pac[tree_budget=full]")]
    skipped: dict = {}
    configs = _fixed_configs(specs, [4, 32], skipped)
    assert configs == [Config("ar", 1), Config("plain-ar", 1), Config("sjd-pac[tree_budget=full]", 32)]
    assert list(skipped["skipped"]) == ["sjd-pac[tree_budget=full] @ 4"]


def test_a_bfloat16_decode_of_float32_weights_is_timed_against_the_float32_plain_loop_too():
    """The embedded models ship float32 weights; in bfloat16 (their default on a CPU with native bf16)
    the plain loop a user writes may run them as shipped, and on a CPU a plain loop runs faster so:
    bench times that loop too, and speedups are against the fastest baseline. A float32 decode, or a
    model whose weights are not ours, gets no such row."""
    from jacobigen.models import load_bundle
    from jacobigen.tools.bench import float32_twin

    b16 = load_bundle("emoji-names", "cpu", dtype="bfloat16")
    assert {p.dtype for p in float32_twin(b16, "emoji-names").model.parameters()} == {torch.float32}
    assert float32_twin(load_bundle("emoji-names", "cpu", dtype="float32"), "emoji-names") is None
    assert float32_twin(load_bundle("random", "cpu", dtype="bfloat16"), "random") is None
    rows, extra = run_bench(
        b16, ["ar"], [4], ["red heart"], [0], progress=False, warmup=False, model_spec="emoji-names"
    )
    assert [(r.method, r.runs) for r in rows] == [("ar", 1), ("plain-ar", 1), ("plain-ar-float32", 1)]
    fastest = min(rows, key=lambda r: r.wall)
    assert extra["baseline"]["wall"] == fastest.method
    assert all(r.latency_speedup == pytest.approx(fastest.wall / r.wall) for r in rows)


def test_compile_failure_is_one_clear_error(monkeypatch):
    def broken(fn, **kwargs):  # compiles "fine", fails at the first call, as inductor does
        def call(*args, **kw):
            raise RuntimeError("no C++ compiler found\nlong traceback")

        return call

    monkeypatch.setattr(torch, "compile", broken)
    with pytest.raises(JacobigenError, match="torch.compile failed on this machine .*no C\\+\\+ compiler found$"):
        run_compiled_bench(random_bundle(), ["sjd"], [4], ["red heart"], [0], progress=False)


def test_thread_policy():
    model = random_bundle().model
    before = torch.get_num_threads()
    try:
        assert sum(p.numel() for p in model.parameters()) < SMALL_MODEL
        assert choose_threads(model) == 1 == torch.get_num_threads()
        assert choose_threads(model, 2) == 2 == torch.get_num_threads()
        with pytest.raises(ValueError):
            choose_threads(model, 0)
    finally:
        torch.set_num_threads(before)


def test_bad_thread_counts_are_a_message():
    res = CliRunner().invoke(main, ["bench", "--model", "random", "--threads", "0"])
    assert res.exit_code != 0 and "thread counts must be >= 1" in res.output


def test_figures_follow_model_and_seed():
    def nfe(seed_model, seeds):
        rows, _ = run_bench(
            random_bundle(seed=seed_model), ["sjd"], [8], ["red heart"], seeds, progress=False, warmup=False
        )
        return next(r.nfe for r in rows if r.method == "sjd")

    base = nfe(0, [0])
    assert nfe(1, [0]) != base or nfe(0, [1]) != base


def test_block_sizes_carve_the_tree_and_count_pjd_segments():
    from jacobigen import METHODS
    from jacobigen.decode.costs import block_size

    layout = random_bundle().layout  # 16 x 16 with EOL
    assert block_size(METHODS["sjd"].build(16), layout) == 16
    assert block_size(METHODS["sjd-pac"].build(16), layout) == 16  # the tree is part of the window
    assert block_size(METHODS["sjd-pac"].build(32, tree_budget="full"), layout) == 32
    rows = METHODS["pjd"].build(16, pjd_context=4).schedule.segments(16, 16)
    assert rows == 5 and block_size(METHODS["pjd"].build(16, pjd_context=4), layout) == 5 * 16
    # PJD's rows add their tree (default budget 3) to each row's window
    assert block_size(METHODS["pjd+scd-mc+pac"].build(16, pjd_context=4), layout) == 5 * (16 + 3)


@pytest.mark.slow
def test_bench_runs_method_variants_and_skips_what_cannot_fit(tmp_path):
    res = CliRunner().invoke(
        main,
        [
            "bench",
            "--model",
            "random",
            "--methods",
            "sjd-pac[tree_budget=full],sjd-pac[tree_budget=2,window=8]",
            "--window",
            "4,24",
            "--prompts",
            "1",
            "--threads",
            "1",
            "--out",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "bench.json").read_text())
    names = [(r["method"], r["window"]) for r in data["rows"]]
    assert ("sjd-pac[tree_budget=full]", 24) in names and ("sjd-pac[tree_budget=full]", 4) not in names
    assert ("sjd-pac[tree_budget=2,window=8]", 8) in names
    assert "at least 21" in data["skipped"]["sjd-pac[tree_budget=full] @ 4"]
    assert "Skipped sjd-pac[tree_budget=full] @ 4" in (tmp_path / "bench.md").read_text()
    assert (tmp_path / "tokens_vs_nodes.png").stat().st_size > 1000
    full = next(r for r in data["rows"] if r["method"] == "sjd-pac[tree_budget=full]")
    assert full["nodes"] == 24 and full["tokens_per_node"] > 0


def test_bench_rejects_a_bad_variant():
    res = CliRunner().invoke(main, ["bench", "--model", "random", "--methods", "sjd-pac[tree_budget=lots]"])
    assert res.exit_code == 2 and "tree_budget" in res.output


def test_provenance_names_the_code_and_the_weights():
    """A benchmark JSON names the shipped weights by the sha256 of each file, and the commit of
    the checkout it ran from (None outside one)."""
    shipped = weights_provenance("default")
    assert set(shipped) == {"ar.safetensors", "vq.safetensors"}
    assert shipped["vq.safetensors"] == hashlib.sha256((WEIGHTS / "vq.safetensors").read_bytes()).hexdigest()
    assert weights_provenance("random") == "random:seed=0"
    git = git_commit()
    checkout = (Path(jacobigen.__file__).resolve().parents[2] / ".git").exists() and shutil.which("git") is not None
    assert (git["git_commit"] is not None) == checkout and git["git_dirty"] in ((True, False) if checkout else (None,))
    if checkout:
        assert re.fullmatch("[0-9a-f]{40}", git["git_commit"])


# --- bench --steps FILE: a step table, nothing else, and never a file it did not write


def steps_cli(path, *more):
    return CliRunner().invoke(main, ["bench", "--model", "random", "--steps", str(path), "--prompts", "1", *more])


def test_steps_refuses_a_file_that_is_no_step_table(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    res = steps_cli(notes)
    assert res.exit_code == 2 and "exists and is not a step table" in res.output, res.output
    assert "model:" not in res.output and notes.read_text() == "my notes\n"  # refused before the model loads


def test_steps_refuses_another_models_table_and_says_what_it_wrote(tmp_path):
    from jacobigen.tools.steps import write_table

    other = tmp_path / "other.json"
    write_table(other, random_bundle(seed=1), {"ar@1": {"nfe": 272, "tokens_per_iteration": 1, "images": 1}}, {}, {})
    before = other.read_bytes()
    res = steps_cli(other)
    assert res.exit_code == 2 and "holds the step table of 'random'" in res.output, res.output
    assert "a table holds one model's entries" in res.output and other.read_bytes() == before
    mine = tmp_path / "mine.json"
    first = steps_cli(mine)
    assert first.exit_code == 0 and "added the entry of random for sampling" in first.output, first.output
    assert "(13 method@window rows; 1 entry in the table)" in first.output
    second = steps_cli(mine, "--temperature", "0.5")
    assert "added the entry" in second.output and "2 entries in the table" in second.output, second.output
    third = steps_cli(mine, "--temperature", "0.5")
    assert "replaced the entry" in third.output and "2 entries in the table" in third.output, third.output


@pytest.mark.parametrize(
    "more", [["--methods", "sjd"], ["--window", "8"], ["--fid", "2"], ["--out", "b"], ["--compile"]]
)
def test_steps_refuses_the_options_it_would_ignore(tmp_path, more):
    res = steps_cli(tmp_path / "t.json", *more)
    assert res.exit_code == 2 and f"{more[0]} cannot apply with --steps" in res.output, res.output
    assert not (tmp_path / "t.json").exists()
