"""Lossless decoders sample exactly the AR distribution; the mutants of docs/DESIGN.md §6.2 do not.

Every correct configuration must give p > PASS on the same seeded samples every run; every mutant
p < FAIL (measured p-values for mutants are below 1e-30).
"""

import pytest

from jacobigen import METHODS, get_method
from jacobigen.core.layout import ImageLayout
from jacobigen.core.sampling import SamplingConfig
from jacobigen.decode.api import make_decoder
from jacobigen.decode.jacobi import Parts
from jacobigen.parts.drafters import Independent, VerificationPrior
from jacobigen.parts.tree import ProactiveTree
from jacobigen.parts.verifiers import Verifier
from jacobigen.tools.exactness import PROMPT, UNCOND, exact_distribution, gof_pvalue, layout, sample, tiny_model
from tests.helpers.mutants import (
    CarryOldQ,
    CopyWithBaseQ,
    MinimumAcceptance,
    NarrowSupport,
    NoiseAcrossPositions,
    PeekingTree,
    ResidualFromTarget,
    ResidualUnlessUnitMass,
    SiblingsWithReplacement,
    StaleQ,
    UnfusedQ,
)

N = 20_000
PASS, FAIL = 1e-4, 1e-8
SAMPLINGS = {
    "plain": SamplingConfig(),
    "cfg-topp": SamplingConfig(cfg=2.0, top_p=0.95, temperature=0.9),
    "topk": SamplingConfig(top_k=2, cfg=1.5),
}
LOSSLESS = [name for name, m in METHODS.items() if m.lossless and name != "ar"]
# Small trees so that the 3-id test vocabulary exercises both full and exhausted sibling sets
# (depth counts the root: depth 3 puts siblings at two drafted depths).
SMALL_TREE = {"tree_depth": 3, "tree_width": 2}


@pytest.fixture(scope="module")
def model():
    return tiny_model()


@pytest.fixture(scope="module")
def exact(model):
    cache = {}

    def get(eol, sampling):
        if (eol, sampling) not in cache:
            cache[eol, sampling] = exact_distribution(model, layout(eol), sampling)
        return cache[eol, sampling]

    return get


def pvalue(model, exact, parts, eol=True, sampling="plain"):
    s = SAMPLINGS[sampling]
    return gof_pvalue(exact(eol, s), sample(model, layout(eol), s, parts, N))


@pytest.mark.slow
@pytest.mark.parametrize(
    "window,eol,sampling",
    [
        (1, True, "plain"),
        (1, False, "cfg-topp"),
        (2, True, "cfg-topp"),
        (2, False, "plain"),
        (8, True, "plain"),
        (8, True, "cfg-topp"),
        (8, False, "cfg-topp"),
    ],
)
def test_sjd_is_exact(model, exact, window, eol, sampling):
    assert pvalue(model, exact, Parts(Independent(), Verifier(), window), eol, sampling) > PASS


@pytest.mark.slow
@pytest.mark.parametrize("window", [4, 8])
@pytest.mark.parametrize("method", LOSSLESS)
def test_every_lossless_preset_is_exact(model, exact, method, window):
    spec = METHODS[method]
    opts = {k: v for k, v in {**SMALL_TREE, "tree_depth": 4 if window == 8 else 3}.items() if k in spec.options}
    sampling = "cfg-topp" if window == 8 else "plain"
    assert pvalue(model, exact, spec.build(window, **opts), True, sampling) > PASS


@pytest.fixture(scope="module")
def shifted():
    """A layout whose image ids start past 0 (3..5, end of line 6, end 7) in a vocabulary with ids on
    both sides of the span, as a family checkpoint's (Chameleon's codes start at 4): the decoders'
    tables cover the span, so an id offset gone wrong samples the wrong ids."""
    model = tiny_model(vocab=10)
    lay = ImageLayout(2, 3, (3, 6), eol_id=6, end_id=7)
    return model, lay, {s: exact_distribution(model, lay, SAMPLINGS[s]) for s in ("plain", "topk")}


@pytest.mark.slow
@pytest.mark.parametrize("method", LOSSLESS)
def test_every_lossless_preset_is_exact_where_image_ids_start_past_zero(shifted, method):
    model, lay, exact = shifted
    spec = METHODS[method]
    sampling = "topk" if method.startswith("scd-gs") else "plain"  # top-k: the support ids, offset
    parts = spec.build(4, **{k: v for k, v in SMALL_TREE.items() if k in spec.options})
    assert gof_pvalue(exact[sampling], sample(model, lay, SAMPLINGS[sampling], parts, N)) > PASS


@pytest.mark.slow
@pytest.mark.parametrize("method", ["sjd-pac", "scd-gs+pac"])
def test_trees_are_exact_where_image_ids_start_past_zero(shifted, method):
    """The same layout with the small tree in every block (window 4 holds no automatic tree): siblings
    are drawn over the tables' columns and verified as ids."""
    model, lay, exact = shifted
    sampling = "topk" if method.startswith("scd-gs") else "plain"
    parts = METHODS[method].build(8, **SMALL_TREE, tree_budget="full")
    assert gof_pvalue(exact[sampling], sample(model, lay, SAMPLINGS[sampling], parts, N)) > PASS


@pytest.mark.slow
@pytest.mark.parametrize("method", ["scd-gs", "scd-gs+pac", "scd-mc+vp"])
def test_top_k_slice_is_exact(model, exact, method):
    """With top-k the pipeline names each target's support and Gumbel sharing argmaxes over it
    alone (the layout's prior gets a plain draw); the narrowed-support mutant shows the path runs."""
    opts = {k: v for k, v in SMALL_TREE.items() if k in METHODS[method].options}
    assert pvalue(model, exact, METHODS[method].build(6, **opts), True, "topk") > PASS


@pytest.mark.slow
@pytest.mark.parametrize(
    "method,alpha,sampling",
    [("scd-mc", 0.5, "plain"), ("scd-gs", 0.5, "cfg-topp"), ("scd-gs", 0.3, "topk"), ("scd-gs+pac", 0.7, "plain")],
)
def test_every_coupling_strength_is_exact(model, exact, method, alpha, sampling):
    """SCD's alpha sweep: a coin per slot between coupling and a fresh draw."""
    opts = {k: v for k, v in SMALL_TREE.items() if k in METHODS[method].options}
    assert pvalue(model, exact, METHODS[method].build(6, alpha=alpha, **opts), True, sampling) > PASS


@pytest.mark.slow
def test_narrowed_support_is_rejected(model, exact):
    assert pvalue(model, exact, Parts(NarrowSupport(), Verifier(), 6), True, "topk") < FAIL


@pytest.mark.slow
@pytest.mark.parametrize("budget,window", [("auto", 24), ("full", 21)])
def test_default_tree_is_exact(model, exact, budget, window):
    """Paper defaults (depth 3, width 4 > the 3 image ids): exhausted sibling sets; the reference's
    21-node tree at the smallest window that holds it, and the automatic budget (which grows trees
    only in windows that hold the reference tree)."""
    assert pvalue(model, exact, METHODS["sjd-pac"].build(window, tree_budget=budget)) > PASS


@pytest.mark.slow
@pytest.mark.parametrize(
    "budget,sampling",
    [(1, "plain"), (3, "cfg-topp"), ("full", "plain"), ("full", "cfg-topp"), ("auto", "plain"), ("auto", "cfg-topp")],
)
def test_budgeted_trees_are_exact(model, exact, budget, sampling):
    """Width 2 below the 3 image ids, so siblings are tested and rejected; the budget picks which
    of the 4 off-spine nodes of a depth-3 tree go into the window of 8 (the automatic budget with
    no bar, so that its trees grow on this tiny model). Siblings do get committed."""
    parts = METHODS["sjd-pac"].build(8, tree_depth=3, tree_width=2, tree_budget=budget, tree_min_gain=0.0)
    assert pvalue(model, exact, parts, True, sampling) > PASS
    s = SAMPLINGS[sampling]
    rows = ([PROMPT, UNCOND] if s.guided else [PROMPT]) * 500
    _, stats = make_decoder(model, layout(True), s, parts).run(rows, list(range(500)))
    assert sum(stats.sibling_tokens) > 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "name,parts",
    [
        ("1-residual-from-p", Parts(Independent(), ResidualFromTarget(), 4)),
        ("2-old-q-after-coupling", Parts(CarryOldQ(), Verifier(), 4)),
        ("3-stale-q", Parts(StaleQ(), Verifier(), 4)),
        ("6-residual-fallback", Parts(Independent(), ResidualUnlessUnitMass(), 4)),
        ("7-min-acceptance", Parts(Independent(), MinimumAcceptance(), 4)),
    ],
)
def test_mutants_are_rejected(model, exact, name, parts):
    assert pvalue(model, exact, parts) < FAIL


@pytest.fixture(scope="module")
def sharp():
    """A sharper, more context-dependent model: stale beliefs there are often wrong, so the
    sibling and fusion paths run often enough to matter."""
    model = tiny_model(sharpness=3.0)
    return model, exact_distribution(model, layout(True), SAMPLINGS["plain"])


def sharp_pvalue(sharp, parts):
    model, ex = sharp
    return gof_pvalue(ex, sample(model, layout(True), SAMPLINGS["plain"], parts, N))


@pytest.mark.slow
def test_tree_mutant_rejected_where_siblings_matter(sharp):
    """Mutant 5: a full 3-wide tree over the 3 image ids; the correct tree passes at the same settings."""
    assert sharp_pvalue(sharp, Parts(Independent(), Verifier(), 13, ProactiveTree(3, 3, "full"))) > PASS
    assert sharp_pvalue(sharp, Parts(Independent(), Verifier(), 13, SiblingsWithReplacement(3, 3, "full"))) < FAIL


@pytest.mark.slow
def test_tree_shape_that_peeks_at_the_target_is_rejected(sharp):
    """A tree whose budget is spent with p: of the full tree in the block, only the two off-spine
    nodes the target values most are verified."""
    assert sharp_pvalue(sharp, Parts(Independent(), PeekingTree(), 13, ProactiveTree(3, 3, "full"))) < FAIL


STRONG_VP = dict(history=2, growth_steps=1, top_k=3, weight=8.0, decay=0.5)


class RecordingVP(VerificationPrior):
    moved = 0.0

    def fuse(self, p, past, count):
        fused = super().fuse(p, past, count)
        RecordingVP.moved = max(RecordingVP.moved, float((fused - p).abs().sum(-1).max()) / 2)
        return fused


@pytest.mark.slow
def test_vp_mutant_rejected_where_fusion_moves_q(sharp):
    """Mutant 4 only shows where fusion really moves q (at the paper's settings it barely does on
    so small a model): N = 1 and a strong weight. The correct VP passes at the same settings, and
    we check that fusion did move q (total variation between p and p')."""
    assert sharp_pvalue(sharp, Parts(RecordingVP(Independent(), **STRONG_VP), Verifier(), 6)) > PASS
    assert RecordingVP.moved > 0.5
    assert sharp_pvalue(sharp, Parts(UnfusedQ(Independent(), **STRONG_VP), Verifier(), 6)) < FAIL


@pytest.mark.slow
@pytest.mark.parametrize(
    "method,window,options",
    [
        ("copy", 3, {}),  # slots entering a 3-token window often find the row above committed
        ("scd-gs+copy", 3, {}),
        ("copy", 6, {"copy_min_p": 0}),  # into every slot with a source
        ("scd-mc+pac+copy", 6, {**SMALL_TREE, "copy_min_p": 0}),
        ("scd-mc+copy", 6, {"copy_min_p": 0.3}),
        ("pjd+scd-mc+copy", 6, {"pjd_context": 3, "copy_min_p": 0}),  # PJD's rows at c = C (exact)
    ],
)
def test_frame_copy_is_exact(model, exact, method, window, options):
    """The copy drafter's point mass (the row above on this 2-row layout) is its exact q."""
    assert pvalue(model, exact, get_method(method).build(window, **options), True, "cfg-topp") > PASS


@pytest.mark.slow
@pytest.mark.parametrize(
    "method,window,options,sampling",
    [
        ("scd-gs+invariant", 8, {}, "plain"),
        ("sjd+invariant", 8, {}, "cfg-topp"),
        ("scd-mc+pac+invariant", 6, SMALL_TREE, "topk"),
        ("sjd+vp+invariant", 6, {}, "plain"),
        ("scd-gs+invariant+copy", 6, {"copy_min_p": 0}, "cfg-topp"),
        ("pjd+scd-mc+invariant", 6, {"pjd_context": 3}, "plain"),  # PJD's rows at c = C
    ],
)
def test_the_invariant_verifier_is_exact(model, exact, method, window, options, sampling):
    """Same seed, same tokens as ar (docs/DESIGN.md §10), and the distribution stays exact: ar's
    Gumbel-max draw is (window 1 above), so its tokens, whatever drafted them, are."""
    assert pvalue(model, exact, get_method(method).build(window, **options), True, sampling) > PASS


@pytest.mark.slow
def test_noise_shared_across_positions_is_rejected(model, exact):
    assert pvalue(model, exact, Parts(Independent(), NoiseAcrossPositions(), 6)) < FAIL


@pytest.mark.slow
@pytest.mark.parametrize("window,min_p", [(3, None), (6, 0)])
def test_frame_copy_mutant_is_rejected(model, exact, window, min_p):
    assert pvalue(model, exact, Parts(CopyWithBaseQ(Independent(), min_p), Verifier(), window)) < FAIL
