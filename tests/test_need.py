"""tests.helpers.need: a missing optional dependency skips locally and fails under CI=1."""

import json
import re
from pathlib import Path

import pytest

from tests.helpers.need import need

MISSING = "jacobigen_no_such_module"


@pytest.mark.parametrize("ci", [None, "1"])
def test_a_present_module_is_imported(monkeypatch, ci):
    monkeypatch.delenv("CI", raising=False) if ci is None else monkeypatch.setenv("CI", ci)
    assert need("json") is json


@pytest.mark.parametrize("ci", [None, "", "0", "false"])
def test_a_missing_module_skips_outside_ci(monkeypatch, ci):
    monkeypatch.delenv("CI", raising=False) if ci is None else monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.skip.Exception, match="the extra is not installed"):
        need(MISSING, reason="the extra is not installed")


@pytest.mark.parametrize("ci", ["1", "true"])
def test_a_missing_module_fails_under_ci(monkeypatch, ci):
    monkeypatch.setenv("CI", ci)
    with pytest.raises(ImportError, match=f"{MISSING} is missing and CI is set"):
        need(MISSING)


TESTS = Path(__file__).resolve().parent
SKIP = re.compile(r"^(\s*)(?:\w+ = )?pytest\.importorskip\(\s*[\"']([\w.]+)[\"']", re.M)


def importorskips() -> list[tuple[str, bool, str]]:
    """Each pytest.importorskip in the tests: (file, whether at module level, module)."""
    return [
        (str(path.relative_to(TESTS)), not m[1], m[2])
        for path in sorted(TESTS.rglob("*.py"))
        if path.name != "need.py"
        for m in SKIP.finditer(path.read_text())
    ]


def test_no_test_skips_when_our_own_code_fails_to_import():
    """An ImportError in the package or the training scripts is a failure, never a skip."""
    ours = {"jacobigen", "tests"} | {p.stem for p in (TESTS.parent / "training").glob("*.py")}
    assert not [s for s in importorskips() if s[2].split(".")[0] in ours]


def test_module_level_optional_imports_go_through_need():
    """A module-level skip hides the whole file: under CI=1 that must fail instead (need)."""
    assert not [s for s in importorskips() if s[1]]
