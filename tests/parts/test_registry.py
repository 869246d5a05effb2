"""Method strings and the parts registry. ``Sharpened`` shows that a drafter with one option joins
from a file of its own (here, this test): no edit in the package (docs/DESIGN.md §7.1)."""

from dataclasses import dataclass

import pytest
from click.testing import CliRunner

from jacobigen import METHODS, ConfigError, get_method
from jacobigen.cli import main
from jacobigen.core.checks import number
from jacobigen.core.registry import PARTS, register
from jacobigen.core.rng import Stream
from jacobigen.core.sampling import SamplingConfig
from jacobigen.decode.jacobi import Parts
from jacobigen.decode.methods import parse_variant
from jacobigen.parts.drafters import Drafter
from jacobigen.parts.verifiers import Verifier
from jacobigen.tools.exactness import exact_distribution, gof_pvalue, layout, sample, tiny_model
from tests.decode.test_exactness import FAIL, PASS, SMALL_TREE


@register("sharp", "drafter", "drafts from the belief raised to a power (the registry's example)", prefix="sharp_")
@dataclass(eq=False)
class Sharpened(Drafter):
    """Draws from belief ** power, renormalised, and records that law as q: exact for every power."""

    power: float = 2.0

    def __post_init__(self):
        self.power = number("sharp_power", self.power, 0, 4, lo_open=True)

    def draft(self, slots, draws):
        q = slots.belief**self.power
        q = q / q.sum(-1, keepdim=True)
        return draws.sample(q, slots.positions, Stream.DRAFT), q


class SharpenedRecordsBelief(Sharpened):
    """Mutant: draws sharpened, records the belief as q."""

    def draft(self, slots, draws):
        return super().draft(slots, draws)[0], slots.belief


def test_a_registered_drafter_joins_method_strings():
    method = get_method("sharp+pac")
    assert method.lossless and method.part("drafter") is PARTS["sharp"]
    assert method.options["sharp_power"] == 2.0 and "tree_budget" in method.options and "alpha" not in method.options
    assert method.build(32, sharp_power=3).drafter.power == 3.0
    variant = parse_variant("sharp[sharp_power=1.5,window=6]")
    assert variant.build(16).window == 6 and variant.build(16).drafter.power == 1.5


@pytest.mark.parametrize("value", [0, 4.5, "x", True, float("nan")])
def test_its_option_is_checked(value):
    with pytest.raises(ConfigError, match="sharp_power must be a finite number in"):
        get_method("sharp").build(8, sharp_power=value)
    with pytest.raises(ConfigError, match="has no option"):
        get_method("sharp").build(8, sharp_pwr=2)


def test_its_option_is_checked_before_the_model_loads():
    res = CliRunner().invoke(
        main, ["generate", "x", "--model", "random", "--method", "sharp+pac", "-o", "sharp_power=9"]
    )
    assert res.exit_code == 2 and "sharp_power must be a finite number in (0, 4], got 9" in res.output


@pytest.fixture(scope="module")
def tiny():
    model = tiny_model()
    return model, exact_distribution(model, layout(True), SamplingConfig())


def pvalue(tiny, parts):
    model, exact = tiny
    return gof_pvalue(exact, sample(model, layout(True), SamplingConfig(), parts, 20_000))


@pytest.mark.parametrize("text,window", [("sharp", 4), ("sharp+pac", 8), ("scd-gs+pac+vp", 8)])
def test_parsed_methods_are_exact(tiny, text, window):
    """A new drafter alone and with the tree, and a combination no preset names."""
    method = get_method(text)
    assert pvalue(tiny, method.build(window, **{k: v for k, v in SMALL_TREE.items() if k in method.options})) > PASS


def test_the_exactness_test_sees_a_wrong_q(tiny):
    assert pvalue(tiny, Parts(SharpenedRecordsBelief(), Verifier(), 4)) < FAIL


def test_method_strings_name_parts():
    assert get_method("pac+scd-mc").parts == METHODS["sjd-pac"].parts
    assert get_method("vp").parts == METHODS["sjd-vp"].parts
    assert not get_method("scd-gs+lantern").lossless and not get_method("pjd+scd-gs").lossless
    assert get_method("pjd+scd-gs+pac").options["tree_budget"] == 3  # PJD's rows take a numbered tree
    assert get_method("scd-gs+pac").options["tree_budget"] == "auto"
    for text, match in [
        ("scd-mc+scd-gs", "names 2 drafters"),
        ("gsd+lantern", "names 2 verifiers"),
        ("sjd+sjd", "twice"),
        ("sjd+nope", "unknown method 'sjd\\+nope'"),
        ("sjd+", "unknown"),
    ]:
        with pytest.raises(ConfigError, match=match):
            get_method(text)


def test_registration_keeps_names_and_options_apart():
    for args, match in [
        (("sjd", "drafter", "x"), "taken"),
        (("a+b", "drafter", "x"), "taken"),
        (("fresh", "layout", "x"), "kind"),
        (("fresh", "tree", "x", "sharp_"), "sharp_power"),
    ]:
        with pytest.raises(ConfigError, match=match):
            register(*args)(Sharpened)
    assert "fresh" not in PARTS
    register("sharper", "drafter", "x", "sharp_")(Sharpened)  # two drafters never meet: they may share options
    del PARTS["sharper"]
