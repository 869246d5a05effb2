"""`jacobigen analyze`: the seed papers' diagnostics, on a tiny model (figures and JSON)."""

import json

import pytest
from click.testing import CliRunner

from jacobigen.cli import main
from jacobigen.models.bundle import ModelBundle, palette_decode, rows_encoder
from jacobigen.tools.analyze import run_all
from jacobigen.tools.exactness import layout, tiny_model

LAYOUT = layout(True, rows=4, cols=6)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    pipe = ModelBundle(
        "tiny",
        tiny_model(sharpness=3.0),
        LAYOUT,
        rows_encoder(lambda text: [5, 6], [7]),
        lambda g, _=None: palette_decode(g, LAYOUT.image_ids),
        defaults={"cfg": 2.0},
    )
    out = tmp_path_factory.mktemp("analyze")
    return run_all(pipe, ["a"], list(range(8)), 8, out, progress=False), out


def test_every_figure_has_its_json(results):
    _, out = results
    for name in ("alpha", "hamming", "cfg", "accepted", "influence"):
        assert (out / f"{name}.png").stat().st_size > 0
    for name in ("alpha", "cfg", "accepted", "influence"):
        data = json.loads((out / f"{name}.json").read_text())
        assert data["settings"]["model"] == "tiny" and data["data"]
        assert {"threads", "torch", "device", "git_commit", "weights", "loadavg_before", "loadavg_after"} <= set(
            data["environment"]
        )


def test_coupling_makes_drafts_stable(results):
    """SCD's claim on its own measurement: full coupling changes fewer drafts per iteration than
    independent drafting, for maximal coupling and Gumbel sharing."""
    r, _ = results
    for method in ("scd-mc", "scd-gs"):
        ends = {x["alpha"]: x["hamming"][0] for x in r["alpha"] if x["method"] == method}
        assert ends[1.0] < ends[0.0]


def test_a_changed_token_moves_its_neighbour_most(results):
    inf = results[0]["influence"]
    assert inf["tv_by_distance"][0] > 0 and inf["tv_by_distance"][0] >= max(inf["tv_by_distance"][5:])
    assert len(inf["tv_by_column_offset"]) == 2 * LAYOUT.cols - 1


def test_accepted_lengths_cover_the_methods(results):
    acc = results[0]["accepted"]
    assert set(acc) == {"sjd", "scd-mc", "scd-gs", "sjd-pac"}
    assert all(0 <= h["single_token_share"] <= 1 for h in acc.values())


@pytest.mark.slow
def test_cli_on_the_random_model(tmp_path):
    res = CliRunner().invoke(
        main,
        [
            "analyze",
            "--model",
            "random",
            "--prompt",
            "red heart",
            "--seeds",
            "1",
            "--window",
            "8",
            "--out",
            str(tmp_path),
            "--no-progress",
        ],
    )
    assert res.exit_code == 0, res.output
    assert (tmp_path / "influence.png").exists() and "wrote" in res.output
