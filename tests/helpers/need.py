"""Optional dependencies in tests: skipped where they are missing, except in CI.

CI (``.ci/run`` sets ``CI=1``) installs the test extra, so there a missing package means a broken
install, and a skip would hide every test that needs it: ``need`` fails instead."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "") not in ("", "0", "false")


def need(module: str, reason: str | None = None) -> ModuleType:
    """``module`` imported; if it is missing, the calling test (or module) is skipped, or under CI
    an ImportError says why it may not be."""
    if not in_ci():
        return pytest.importorskip(module, reason=reason)
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(
            f"{module} is missing and CI is set: .ci/run installs the test extra, so a skip would hide "
            f"the tests that need it ({e})"
        ) from e
