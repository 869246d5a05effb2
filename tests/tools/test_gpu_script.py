"""benchmarks/gpu/measure.py, the prepared GPU run, keeps working: its --tiny mode on the CPU."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "measure.py"


def test_tiny_run_writes_every_part(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # tiny model: one thread is faster and steadier
    env.pop("OUT", None)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--tiny", "--device", "cpu", "--out", str(tmp_path), "--skip-embedded"]
        + ["--backend", "eager", "--methods", "ar,sjd,sjd-pac", "--compiled-methods", "ar,sjd-pac"]
        + ["--emulate-graphs"],  # graphs recorded and replayed through OpReplay, CUDA graphs' stand-in
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "measure.json").read_text())
    assert (tmp_path / "measure.md").read_text().startswith("# GPU measurements")
    assert report["meta"]["tiny"] and report["model"]["status"] == "ok"
    assert report["bandwidth"]["gbps"] > 0

    fwd = report["forward"]
    assert fwd["status"] == "ok", fwd.get("error")
    got = [(p["variant"], p["block"]) for p in fwd["points"]]
    variants = ("eager", "graphed", "default")
    assert got == [(v, b) for v in variants for b in (1, 4, 8)] + [("compiled+graphed", 1)]
    assert all(p["median_ms"] > 0 and p["gbps"] > 0 for p in fwd["points"])
    # every variant but eager replayed its graphs (the stand-in's), the default path as generate calls the model
    assert [p["path"] for p in fwd["points"]] == ["eager"] * 3 + ["graphed"] * 7
    assert [(r["variant"], r["path"]) for r in report["plain"]["runs"]] == [
        ("eager", "eager"),
        ("graphed", "graphed"),
        ("compiled+graphed", "graphed"),
    ]

    over = report["overhead"]
    assert over["status"] == "ok", over.get("error")
    assert [(r["method"], r["window"]) for r in over["runs"]] == [("ar", 1), ("sjd", 32), ("sjd-pac", 32)]
    for r in over["runs"]:
        # bookkeeping is the wall time the forward leaves: positive, and with the forward the whole iteration
        per_iter = 1e3 * r["wall_s"] / r["iterations"]
        assert r["nfe"] >= 2 and r["iterations"] >= 2 and r["forward_ms_per_iter"] > 0, r
        assert r["path"] == "graphed", r
        assert 0 < r["bookkeeping_ms_per_iter"] < per_iter, r
        assert r["forward_ms_per_iter"] + r["bookkeeping_ms_per_iter"] == pytest.approx(per_iter), r
    l2 = report["lumina2"]
    assert l2["status"] == "ok", l2.get("error")
    assert [p["block"] for p in l2["points"]] == [1, 4] and all(p["median_ms"] > 0 for p in l2["points"])
    assert all(p["path"] == "graphed" for p in l2["points"])
    assert [r["step_compression"] for r in l2["rows"]] == [1.0, 2.0, 3.0, 4.0]
    assert all(r["seconds"] > 0 for r in l2["rows"]) and "## Lumina-mGPT 2.0" in (tmp_path / "measure.md").read_text()
    batch = report["batch"]
    assert batch["status"] == "ok", batch.get("error")
    got = [(r["method"], r["mode"], r["batch"]) for r in batch["runs"]]
    assert got == [(m, mode, b) for mode in ("shared", "deterministic") for m in ("ar", "scd-mc") for b in (1, 2)]
    assert (
        all(r["images_per_second"] > 0 for r in batch["runs"]) and "## Batches" in (tmp_path / "measure.md").read_text()
    )
    assert all(r["path"] == "graphed" for r in batch["runs"])
    comp = report["compiled"]
    assert comp["status"] == "ok", comp.get("error")
    assert [r["method"] for r in comp["runs"]] == ["ar", "sjd-pac"]
    for r in comp["runs"]:
        assert r["step"] == "captured (eager)" and r["capture_s"] > 0 and r["steady_ms_per_iter"] > 0, r
    table = report["table"]["rows"]
    assert [r["method"] for r in table] == ["ar", "sjd", "scd", "sjd-pac"]
    assert table[0]["forwards"] == 2357 and table[0]["seconds_eager_step"] > 0
    assert report["embedded"]["status"] == "skipped"


def test_a_failing_part_keeps_the_others(tmp_path):
    spec = importlib.util.spec_from_file_location("gpu_measure", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    report = mod.main(
        ["--tiny", "--device", "cpu", "--out", str(tmp_path), "--skip-embedded", "--skip-compiled", "--skip-plain"]
        + ["--sizes", "1,2", "--compiled-sizes", "1", "--backend", "eager", "--methods", "no-such-method"]
    )
    assert report["overhead"]["status"] == "error" and "no-such-method" in report["overhead"]["error"]
    assert report["forward"]["status"] == "ok" and len(report["forward"]["points"]) == 7  # 3 variants x 2, compiled x 1
    assert {p["path"] for p in report["forward"]["points"]} == {"eager"}  # no --emulate-graphs: the CPU runs eagerly
    on_disk = json.loads((tmp_path / "measure.json").read_text())
    assert on_disk["overhead"]["status"] == "error" and on_disk["forward"]["points"]
