"""The benchmark harness end to end on a tiny model; its figures are computed, not copied."""

import json

from click.testing import CliRunner

from jacobigen.bench import run_bench
from jacobigen.cli import main
from jacobigen.pipeline import random_pipeline


def test_bench_cli_writes_outputs(tmp_path):
    res = CliRunner().invoke(main, ["bench", "--model", "random", "--methods", "sjd,scd-mc+pac",
                                    "--window", "4,8,auto", "--prompts", "1", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "bench.json").read_text())
    names = [(r["method"], r["window"], r["auto"]) for r in data["rows"]]
    auto = {m: data["auto"][m]["window"] for m in ("sjd", "scd-mc+pac")}
    assert names == [("ar", 1, False), ("sjd", 4, False), ("sjd", 8, False), ("sjd", auto["sjd"], True),
                     ("scd-mc+pac", 4, False), ("scd-mc+pac", 8, False),
                     ("scd-mc+pac", auto["scd-mc+pac"], True)]
    assert data["cost_curve"]["1"] > 0
    for png in ["speedup.png", "tokens_per_iteration.png", "compression_vs_window.png", "cost_curve.png"]:
        assert (tmp_path / png).stat().st_size > 1000
    ar = data["rows"][0]
    assert ar["nfe"] == 272 and ar["step_compression"] == 1.0
    assert all(r["step_compression"] > 1 for r in data["rows"][1:])
    assert "| scd-mc+pac | 8 |" in (tmp_path / "bench.md").read_text()


def test_bench_cli_fid_writes_figures_and_plot(tmp_path):
    res = CliRunner().invoke(main, ["bench", "--model", "random", "--methods", "sjd", "--window", "4",
                                    "--prompts", "1", "--fid", "4", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "bench.json").read_text())
    ar, sjd = data["rows"]
    assert data["fid"]["images"] == 4 and data["fid"]["ar_vs_ar"] == ar["fid_vs_ar"] > 0
    assert sjd["fid_vs_ar"] > 0 and sjd["fid_vs_data"] is None      # random weights ship no held-out data
    md = (tmp_path / "bench.md").read_text()
    assert "| FID vs ar | FID vs data |" in md and f"ar vs ar on other seeds = {ar['fid_vs_ar']:.1f}" in md
    assert (tmp_path / "fid_vs_speed.png").stat().st_size > 1000


def test_figures_follow_model_and_seed():
    def nfe(seed_model, seeds):
        rows, _ = run_bench(random_pipeline(seed=seed_model), ["sjd"], [8], ["red heart"], seeds,
                            progress=False)
        return rows[1].nfe
    base = nfe(0, [0])
    assert nfe(1, [0]) != base or nfe(0, [1]) != base


def test_block_sizes_count_tree_nodes_and_pjd_segments():
    from jacobigen import METHODS
    from jacobigen.costs import block_size

    layout = random_pipeline().layout                       # 16 x 16 with EOL
    assert block_size(METHODS["sjd"].build(16), layout) == 16
    assert block_size(METHODS["sjd-pac"].build(16), layout) == 1 + 4 + 16 + 64 + 12
    rows = METHODS["pjd"].build(16, pjd_context=4).layout2d.segments(16, 16)
    assert rows == 5 and block_size(METHODS["pjd"].build(16, pjd_context=4), layout) == 5 * 16
