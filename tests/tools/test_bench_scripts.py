"""The benchmark scripts the README's tables come from keep working against today's package (the
tree-compression script once imported a helper that had moved, and nothing noticed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def test_tree_compression_reports_a_row_per_variant_and_window():
    sys.path.insert(0, str(BENCH))
    try:
        import tree_compression
    finally:
        sys.path.remove(str(BENCH))
    text = tree_compression.main(
        [
            "--model",
            "random",
            "--methods",
            "scd-mc,sjd-pac[tree_budget=6]",
            "--windows",
            "8",
            "--prompts",
            "1",
            "--seeds",
            "2",
            "--batch",
            "2",
        ]
    )
    rows = [line for line in text.splitlines() if line.startswith("| scd-mc") or line.startswith("| sjd-pac")]
    assert len(rows) == 2 and all("x |" in r for r in rows)


@pytest.mark.parametrize("script", ["lossy.py", "profile/profile_step.py", "auto/default_vs_ar.py"])
def test_script_starts(script):
    proc = subprocess.run([sys.executable, str(BENCH / script), "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
