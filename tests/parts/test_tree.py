"""The proactive tree's options, budgets and statistics (its exactness lives in test_exactness.py,
its layout against brute force in test_cache_masks.py)."""

import pytest
import torch

from jacobigen import METHODS, generate, get_method
from jacobigen.core.errors import ConfigError
from jacobigen.decode.methods import parse_variant, split_variants
from jacobigen.parts.tree import ProactiveTree
from jacobigen.tools.exactness import layout, tiny_model

LAYOUT = layout(True, rows=4, cols=6)
KW = dict(layout=LAYOUT, seed=list(range(6)), cfg=2.0, uncond=[7])


@pytest.fixture(scope="module")
def model():
    return tiny_model()


def test_depth_counts_the_root_as_the_reference_does():
    tree = ProactiveTree(3, 4, "full")
    assert tree.levels == 2 and 1 + tree.levels + tree.off_spine() == 21  # (4^3 - 1) / 3
    assert ProactiveTree(3, 3, "full").off_spine() + 3 == 13  # the authors' code default
    assert tree.carve(64) == (2, 18) and tree.carve(21) == (2, 18)
    with pytest.raises(ConfigError, match="at least 21"):
        tree.carve(20)
    assert ProactiveTree(3, 4, 5).carve(16) == (2, 5)
    assert ProactiveTree(3, 4, 30).carve(8) == (2, 5)  # the spine keeps the tree's depths
    assert ProactiveTree(3, 4, "auto").carve(2) == (0, 0)  # no room: a plain chain
    assert ProactiveTree(3, 4, "auto").carve(20) == (0, 0)  # auto: the reference tree or none
    assert ProactiveTree(3, 4, "auto").carve(21) == (2, 18)


@pytest.mark.parametrize(
    "options,match",
    [
        ({"tree_budget": "some"}, "tree_budget"),
        ({"tree_budget": -1}, "tree_budget"),
        ({"tree_depth": 0}, "tree_depth"),
        ({"tree_width": 1.5}, "tree_width"),
        ({"tree_min_gain": -0.1}, "min_gain"),
        ({"tree_tail_worth": -1}, "tail_worth"),
        ({"tree_tail_worth": float("inf")}, "tail_worth"),
    ],
)
def test_bad_tree_options_are_clear_errors(options, match):
    with pytest.raises(ConfigError, match=match):
        METHODS["sjd-pac"].build(32, **options)


def test_the_tree_is_part_of_the_window(model):
    """Every iteration evaluates exactly `window` nodes, tree or not."""
    for budget in ("full", 3, "auto"):
        gen = generate(model, [5, 6], method="sjd-pac", window=24, tree_budget=budget, **KW)
        assert set(gen.stats.nodes) == {24}
        assert gen.stats.tokens_per_node == pytest.approx(sum(gen.stats.committed) / (24 * len(gen.stats.nodes)))


def test_a_tree_that_never_grows_is_the_chain(model):
    """Budget 0, an automatic budget that never pays, or one in a window smaller than the
    reference tree (21 nodes at width 4), decode exactly what scd-mc decodes."""
    chain = generate(model, [5, 6], method="scd-mc", window=12, **KW)
    for options in ({"tree_budget": 0}, {"tree_min_gain": float("inf")}, {"tree_width": 4}):
        tree = generate(model, [5, 6], method="sjd-pac", window=12, **options, **KW)
        assert torch.equal(tree.tokens, chain.tokens) and tree.stats.nfe == chain.stats.nfe
        assert sum(tree.stats.sibling_tokens) == 0


def test_the_automatic_bar_falls_with_the_window():
    tree = ProactiveTree()
    assert tree.gain_bar(16) == pytest.approx(0.15) and tree.gain_bar(64) < tree.gain_bar(32) < tree.gain_bar(16)
    assert ProactiveTree(min_gain=0.3).gain_bar(64) == 0.3


def test_two_iteration_reach_counts_a_draft_seen_again_one_iteration_later():
    """Against enumeration: depth j is accepted now when L1 >= j, else next iteration when the
    draft is still ahead (j - L1 - 1 >= 1) and L2 reaches it; L1, L2 independent with P(L >= a) = reach."""
    from jacobigen.parts.tree import two_iteration_reach

    gen = torch.Generator().manual_seed(0)
    reach = torch.rand(3, 6, generator=gen).sort(1, descending=True).values
    reach[0, 3:] = 0  # a row that never accepts past depth 3
    got = two_iteration_reach(reach)
    for row in range(3):
        r = [1.0, *reach[row].tolist(), 0.0]
        pmf = {a: r[a] - r[a + 1] for a in range(7)}
        for j in range(1, 7):
            reached = [(a, b) for a in pmf for b in pmf if a >= j or (j - a - 1 >= 1 and b >= j - a - 1)]
            want = sum(pmf[a] * pmf[b] for a, b in reached)
            assert got[row, j - 1].item() == pytest.approx(want, abs=1e-6)
    assert (got >= reach - 1e-7).all()


def test_the_tail_worth_trims_a_tree_but_not_the_decision_to_build_one():
    """Margins over the two-iteration worth decide whether a tree pays; the nodes it then holds must
    also beat tail_worth / W^2 (W the drafts), what a draft taken from the spine costs later."""
    from jacobigen.parts.tree import AutoBudget

    best = torch.tensor([[0.30, 0.05, 0.02, 0.004, 0.001]])  # the extras' values, best first

    def extras(tail_worth, min_gain=0.05):
        auto = AutoBudget(min_gain, tail_worth)
        auto.start(1, 8, "cpu")  # 8 drafts; a record of a chain that seldom passes depth 1
        auto.trials += 100
        auto.hits += torch.tensor([30.0, 0, 0, 0, 0, 0, 0, 0])
        view = auto.prepare(torch.tensor([8]))
        assert view.worth[0, 3:].max() < 1e-3  # deep drafts are worth nearly nothing over two iterations
        return int(auto.count(view, best, 5))

    assert extras(0) == 5  # every value beats the worth of the depth it displaces
    assert [extras(64 * f) for f in (0.01, 0.03, 0.2)] == [3, 2, 1]  # floors 0.01, 0.03, 0.2
    assert extras(64 * 0.2, min_gain=0.12) == 1  # only the 0.30 node beats the floor, but all count for the bar
    assert extras(64 * 0.2, min_gain=0.3) == 0  # a bar the tree's gain does not reach
    assert extras(64 * 0.5) == 0  # no node beats the floor


def test_the_budget_returns_one_iterations_values_and_keeps_only_its_record():
    """prepare() returns reach, worth, calibration, bar and floor; the budget keeps (and declares as
    STATE) only what the next iteration reads, so a replayed step replaces nothing else."""
    from jacobigen.parts.tree import AutoBudget, Reach

    auto = AutoBudget(0.05, 0.0)
    auto.start(2, 4, "cpu")
    before = set(vars(auto))
    view = auto.prepare(torch.tensor([4, 2]))
    assert isinstance(view, Reach) and set(vars(auto)) == before
    assert set(AutoBudget.STATE) == {"accepted", "hits", "predicted", "trials"} <= before
    assert view.reach.shape == view.worth.shape == (2, 4) and (view.reach[1, 2:] == 0).all()  # past the image
    assert view.bar.shape == view.calibration.shape == (2,)


@pytest.mark.parametrize("min_gain", [None, 0.5])
def test_the_cheap_bound_only_skips_trees_the_budget_would_refuse(model, monkeypatch, min_gain):
    """Drawing candidates for every iteration (no bound) gives the same tokens: the bound skipped
    only iterations whose tree would hold no sibling. It does skip some."""
    from jacobigen.parts.tree import AutoBudget

    bounded = generate(
        model, [5, 6], method="sjd-pac", window=12, tree_min_gain=min_gain, tree_width=2, batch_size=1, **KW
    )
    calls = {"bound": 0, "skipped": 0}
    real = AutoBudget.worth_trying

    def always(self, *args):
        calls["bound"] += 1
        calls["skipped"] += not real(self, *args)
        return True

    monkeypatch.setattr(AutoBudget, "worth_trying", always)
    unbounded = generate(
        model, [5, 6], method="sjd-pac", window=12, tree_min_gain=min_gain, tree_width=2, batch_size=1, **KW
    )
    assert torch.equal(bounded.tokens, unbounded.tokens) and bounded.stats.nfe == unbounded.stats.nfe
    assert calls["skipped"] > 0


def test_full_tree_commits_sibling_tokens(model):
    gen = generate(model, [5, 6], method="sjd-pac", window=24, tree_budget="full", tree_width=2, **KW)
    assert sum(gen.stats.sibling_tokens) > 0
    assert gen.stats.as_dict()["sibling_tokens"] == sum(gen.stats.sibling_tokens)


def test_pjd_rows_take_a_numbered_tree_only():
    assert METHODS["pjd+scd-mc+pac"].options["tree_budget"] == 3
    with pytest.raises(ConfigError, match="auto"):
        tiny = tiny_model()
        generate(tiny, [5, 6], layout=LAYOUT, method="pjd+scd-mc+pac", window=6, tree_budget="auto")


def test_pac_vp_means_its_parts_in_any_order():
    """No alias: ``pac+vp`` names the sjd drafter with the tree and the prior, as ``vp+pac`` does."""
    assert get_method("pac+vp").parts == get_method("vp+pac").parts != METHODS["scd-mc+pac+vp"].parts


def test_method_variants():
    assert split_variants("sjd,sjd-pac[tree_budget=full,window=64], scd-gs") == [
        "sjd",
        "sjd-pac[tree_budget=full,window=64]",
        "scd-gs",
    ]
    v = parse_variant("sjd-pac[tree_budget=full,window=64]")
    assert v.method.name == "sjd-pac" and v.options == {"tree_budget": "full"} and v.window == 64
    assert v.build(16).window == 64 and v.build(16).tree.budget == "full"
    assert parse_variant("ar").window == 1 and parse_variant("scd-mc").window is None
    assert parse_variant("sjd-pac[tree-depth=4]").options == {"tree_depth": 4}
    for bad, match in [
        ("sjd-pac[tree_budget]", "key=value"),
        ("sjd[tree_budget=3]", "no option"),
        ("nope", "unknown method"),
        ("sjd-pac[window=0]", "window"),
        ("sjd-pac[x=1", "METHOD"),
    ]:
        with pytest.raises(ConfigError, match=match):
            parse_variant(bad)
