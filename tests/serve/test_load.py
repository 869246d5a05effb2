"""A small run of the bounded loopback load test (benchmarks/serve/load.py runs 200 requests, 16 at a
time): no errors, every image equal to offline generation."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "serve" / "load.py"


@pytest.mark.slow
def test_concurrent_load_has_no_errors_and_offline_images(tmp_path):
    out = tmp_path / "load.json"
    args = [sys.executable, str(SCRIPT), "--requests", "12", "--concurrency", "4", "--seed", "1", "--out", str(out)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600)
    result = json.loads(out.read_text())
    assert done.returncode == 0, done.stdout + done.stderr
    assert result["errors"] == 0 and result["unequal_to_offline"] == [] and result["images_checked"] == 12
