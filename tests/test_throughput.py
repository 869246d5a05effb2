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
    got = {(r["method"], r["batch_size"]): r for r in rows}
    assert set(got) == {("ar", 1), ("ar", 2), ("sjd", 1), ("sjd", 2)}
    assert got["ar", 1]["forward_passes"] == 2 * 272 and got["ar", 2]["forward_passes"] == 272
    assert got["ar", 1]["step_compression"] == 1.0 and got["sjd", 2]["step_compression"] > 1
    assert all(r["images_per_second"] > 0 for r in rows)
    assert (tmp_path / "throughput.png").stat().st_size > 1000
    assert "| sjd | 2 |" in (tmp_path / "throughput.md").read_text()


def test_throughput_rejects_bad_batch(tmp_path):
    res = CliRunner().invoke(main, ["throughput", "--model", "random", "--batch", "0", "--out", str(tmp_path)])
    assert res.exit_code != 0 and "batch sizes must be >= 1" in res.output
