"""The throughput benchmark end to end on a tiny model; its figures come from the runs."""

import json

from click.testing import CliRunner

from jacobigen.cli import main


def test_throughput_cli_writes_outputs(tmp_path):
    res = CliRunner().invoke(
        main,
        [
            "throughput",
            "--model",
            "random",
            "--methods",
            "ar,sjd",
            "--batch",
            "1,2",
            "--images",
            "2",
            "--window",
            "4",
            "--out",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "throughput.json").read_text())
    rows = data["rows"]
    assert data["model_spec"] == "random" and data["weights"] == "random:seed=0" and "git_commit" in data
    assert {"threads", "torch", "device", "loadavg_before", "loadavg_after"} <= set(data)
    modes = ("shared", "deterministic")
    got = {(r["method"], r["mode"], r["batch_size"]): r for r in rows}
    assert set(got) == {(m, mode, b) for m in ("ar", "sjd") for mode in modes for b in (1, 2)} | {
        ("plain-ar", "shared", b) for b in (1, 2)
    }
    for m in ("ar", "plain-ar"):
        assert got[m, "shared", 1]["forward_passes"] == 2 * 272 and got[m, "shared", 2]["forward_passes"] == 272
    assert got["plain-ar", "shared", 2]["step_compression"] == 1.0 and got["plain-ar", "shared", 2]["lossless"]
    assert got["ar", "deterministic", 1]["step_compression"] == 1.0 and got["sjd", "shared", 2]["step_compression"] > 1
    assert all(r["images_per_second"] > 0 for r in rows)
    assert (tmp_path / "throughput.png").stat().st_size > 1000
    table = (tmp_path / "throughput.md").read_text()
    assert "| sjd | deterministic | 2 |" in table and "| plain-ar | shared | 2 |" in table
    assert "vs baseline" in table and "vs one at a time" in table


def test_throughput_rejects_an_unknown_mode(tmp_path):
    res = CliRunner().invoke(main, ["throughput", "--model", "random", "--modes", "fast", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "fast" in res.output


def test_throughput_rejects_bad_batch(tmp_path):
    res = CliRunner().invoke(main, ["throughput", "--model", "random", "--batch", "0", "--out", str(tmp_path)])
    assert res.exit_code != 0 and "batch sizes must be >= 1" in res.output


def test_throughput_table_compares_with_the_faster_baseline_per_batch():
    from jacobigen.tools.throughput import markdown

    def row(m, b, ips):
        return {
            "method": m,
            "batch_size": b,
            "images_per_second": ips,
            "tokens_per_second": 1.0,
            "forward_passes": 1,
            "step_compression": 1.0,
            "overhead_share": None,
        }

    rows = [row("ar", 4, 1.0), row("plain-ar", 4, 2.0), row("sjd", 4, 3.0), row("sjd", 8, 3.0), row("sjd", 1, 1.5)]
    lines = markdown(rows).splitlines()[2:]
    assert [ln.split(" | ")[5] for ln in lines] == ["0.50x", "1.00x", "1.50x", "-", "-"]  # vs baseline
    assert [ln.split(" | ")[4] for ln in lines] == ["-", "-", "2.00x", "2.00x", "1.00x"]  # vs one at a time
