"""Lossless decoders sample exactly the AR distribution; the mutants of DESIGN.md section 6 do not."""

import pytest

from exact import exact_distribution, gof_pvalue, layout, sample, tiny_model
from jacobigen.drafters import Independent
from jacobigen.jacobi import Parts
from jacobigen.sampling import SamplingConfig
from jacobigen.verifiers import FirstRejection
from mutants import MinimumAcceptance, ResidualFromTarget, ResidualUnlessUnitMass, StaleQ

N = 20_000
PASS, FAIL = 1e-4, 1e-8
SAMPLINGS = {"plain": SamplingConfig(), "cfg-topp": SamplingConfig(cfg=2.0, top_p=0.95, temperature=0.9)}


@pytest.fixture(scope="module")
def model():
    return tiny_model()


@pytest.fixture(scope="module")
def exact_cache(model):
    cache = {}

    def get(eol, sampling):
        key = (eol, sampling)
        if key not in cache:
            cache[key] = exact_distribution(model, layout(eol), sampling)
        return cache[key]
    return get


@pytest.mark.slow
@pytest.mark.parametrize("sampling", SAMPLINGS, ids=str)
@pytest.mark.parametrize("eol", [True, False], ids=["eol", "no-eol"])
@pytest.mark.parametrize("window", [1, 2, 4, 8])
def test_sjd_is_exact(model, exact_cache, sampling, eol, window):
    s = SAMPLINGS[sampling]
    samples = sample(model, layout(eol), s, Parts(Independent(), FirstRejection(), window), N)
    assert gof_pvalue(exact_cache(eol, s), samples) > PASS


@pytest.mark.slow
@pytest.mark.parametrize("name,drafter,verifier", [
    ("1-residual-from-p", Independent, ResidualFromTarget),
    ("3-stale-q", StaleQ, FirstRejection),
    ("6-residual-fallback", Independent, ResidualUnlessUnitMass),
    ("7-min-acceptance", Independent, MinimumAcceptance),
])
def test_mutants_are_rejected(model, exact_cache, name, drafter, verifier):
    s = SAMPLINGS["plain"]
    samples = sample(model, layout(True), s, Parts(drafter(), verifier(), 4), N)
    assert gof_pvalue(exact_cache(True, s), samples) < FAIL
