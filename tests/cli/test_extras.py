"""Optional dependencies: without matplotlib the tables still come, and figure-only commands say
which extra to install before doing any work."""

import sys
import warnings

import pytest
from click.testing import CliRunner

import jacobigen.tools
from jacobigen.cli import main
from jacobigen.core.errors import ConfigError
from jacobigen.tools import extras
from jacobigen.tools.throughput import write_report


@pytest.fixture
def no_matplotlib(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ModuleNotFoundError
    monkeypatch.delitem(sys.modules, "matplotlib.pyplot", raising=False)
    monkeypatch.delitem(sys.modules, "jacobigen.tools.plots", raising=False)
    monkeypatch.delattr(jacobigen.tools, "plots", raising=False)  # an earlier test may have imported it


def test_figures_name_their_extra(no_matplotlib):
    with pytest.raises(ConfigError, match=r'pip install "jacobigen\[plots\]"'):
        extras.plots()


def test_tables_are_written_without_figures(no_matplotlib, tmp_path):
    row = {
        "method": "ar",
        "batch_size": 1,
        "images_per_second": 1.0,
        "tokens_per_second": 272.0,
        "forward_passes": 273,
        "step_compression": 1.0,
        "overhead_share": 0.1,
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        write_report([row], {}, tmp_path, {})
    assert (tmp_path / "throughput.json").exists() and (tmp_path / "throughput.md").exists()
    assert not (tmp_path / "throughput.png").exists()
    assert any("jacobigen[plots]" in str(w.message) for w in caught)


def test_trace_stops_before_generating(no_matplotlib, tmp_path):
    res = CliRunner().invoke(
        main, ["generate", "red heart", "--model", "random", "--out", str(tmp_path / "x.png"), "--trace"]
    )
    assert res.exit_code == 2 and "jacobigen[plots]" in res.output
    assert not (tmp_path / "x.png").exists()
