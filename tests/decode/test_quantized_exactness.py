"""The target of a quantized model is the quantized model: lossless presets that together meet every
pair of parts (tests/helpers/presets.py; each preset's own exactness: tests/decode/test_exactness.py)
sample exactly its AR distribution (the exactness machinery of :mod:`jacobigen.tools.exactness`, on
int8 weights)."""

import numpy as np
import pytest

from jacobigen import METHODS
from jacobigen.core.quantize import quantize_model, quantized_as
from jacobigen.core.sampling import SamplingConfig
from jacobigen.tools.exactness import exact_distribution, gof_pvalue, layout, sample, tiny_model
from tests.helpers.need import need
from tests.helpers.presets import covering

need("torchao")

N = 20_000
PASS = 1e-4
SAMPLING = SamplingConfig(cfg=2.0, top_p=0.95, temperature=0.9)
LOSSLESS = covering([name for name, m in METHODS.items() if m.lossless])
SMALL_TREE = {"tree_depth": 3, "tree_width": 2}


@pytest.fixture(scope="module")
def quantized():
    return quantize_model(tiny_model(), "int8")


@pytest.fixture(scope="module")
def exact(quantized):
    return exact_distribution(quantized, layout(True), SAMPLING)


def test_the_quantized_target_differs_from_the_full_precision_one(quantized, exact):
    """The test below is about the quantized model, not the float one it came from."""
    assert quantized_as(quantized) == "int8"
    full = exact_distribution(tiny_model(), layout(True), SAMPLING)
    assert np.abs(full.probs - exact.probs).max() > 1e-6


@pytest.mark.slow
@pytest.mark.parametrize("method", LOSSLESS)
def test_lossless_presets_are_exact_on_the_quantized_model(quantized, exact, method):
    spec = METHODS[method]
    opts = {k: v for k, v in SMALL_TREE.items() if k in spec.options}
    parts = spec.build(spec.window or 6, **opts)
    assert gof_pvalue(exact, sample(quantized, layout(True), SAMPLING, parts, N)) > PASS
