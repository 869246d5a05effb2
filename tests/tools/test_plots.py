"""Benchmark figures: written without matplotlib's warnings, whatever rows a bench made."""

import warnings

from tests.helpers.need import need

need("matplotlib")

from jacobigen.tools import plots  # noqa: E402


def test_a_bench_of_baselines_alone_draws_without_legend_warnings(tmp_path):
    """`jacobigen bench --methods ar` leaves no method rows beside the baselines: five panels had no
    labelled artists, and matplotlib warned about each empty legend."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plots.plot_bench([], None, tmp_path)
    assert (tmp_path / "speedup.png").is_file() and (tmp_path / "tokens_vs_nodes.png").is_file()
