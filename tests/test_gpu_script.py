"""benchmarks/gpu/measure.py, the prepared GPU run, keeps working: its --tiny mode on the CPU."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "measure.py"


def test_tiny_run_writes_curve_and_preset_rows(tmp_path):
    import jacobigen

    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # tiny model: one thread is faster and steadier
    env.pop("OUT", None)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--tiny", "--device", "cpu", "--out", str(tmp_path), "--skip-embedded"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "measure.json").read_text())
    assert (tmp_path / "measure.md").read_text().startswith("# GPU measurements")
    assert report["meta"]["tiny"] and report["model"]["status"] == "ok"

    curve = report["cost_curve"]
    assert curve["status"] == "ok", curve.get("error")
    assert [p["block"] for p in curve["points"]] == [1, 2, 4, 8, 16]
    assert curve["rows"] == 2 and curve["context"] == 128
    assert all(p["median_s"] > 0 and p["min_s"] <= p["median_s"] <= p["max_s"] for p in curve["points"])

    over = report["overhead"]
    assert over["status"] in ("ok", "partial"), over.get("error")
    assert not over["errors"], over["errors"]
    lossless = [n for n, m in jacobigen.METHODS.items() if m.lossless]
    done = {(r["method"], r["window"]) for r in over["runs"]} | {(s["method"], s["window"]) for s in over["skipped"]}
    expected = {(n, 1 if jacobigen.METHODS[n].window else w) for n in lossless for w in (16, 32)}
    expected.add(("sjd-pac[tree_budget=full,window=64]", 64))  # the reference tree, pinned window
    assert done == expected
    assert over["runs"], "every preset skipped"
    for r in over["runs"]:
        assert r["nfe"] >= 2 and r["wall_s"] >= r["forward_s"] > 0
        assert 0 <= r["overhead_share"] < 1 and r["overhead_ms_per_iter"] >= 0
    assert report["embedded"]["status"] == "skipped"
    assert "cost_curve [ok]" in proc.stdout


def test_a_failing_part_keeps_the_others(tmp_path):
    spec = importlib.util.spec_from_file_location("gpu_measure", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    report = mod.main(
        [
            "--tiny",
            "--device",
            "cpu",
            "--out",
            str(tmp_path),
            "--skip-embedded",
            "--sizes",
            "1,2",
            "--methods",
            "no-such-method",
        ]
    )
    assert report["overhead"]["status"] == "error" and "no-such-method" in report["overhead"]["error"]
    assert report["cost_curve"]["status"] == "ok" and len(report["cost_curve"]["points"]) == 2
    on_disk = json.loads((tmp_path / "measure.json").read_text())
    assert on_disk["overhead"]["status"] == "error" and on_disk["cost_curve"]["points"]
