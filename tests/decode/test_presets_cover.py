"""The slow tier's cover of the presets (tests/helpers/presets.py) runs every part and every pair."""

from jacobigen import METHODS
from tests.helpers.presets import covering, part_pairs


def test_the_cover_runs_every_part_and_pair_in_fewer_presets():
    names = list(METHODS)
    cover = covering(names)
    assert set().union(*map(part_pairs, cover)) == set().union(*map(part_pairs, names))
    parts = {p.name for n in cover for p in METHODS[n].parts}
    assert parts == {p.name for m in METHODS.values() for p in m.parts}
    assert {"pjd", "pac", "vp", "gsd", "lantern", "scd-gs", "scd-mc"} <= parts
    assert len(cover) < len(names)
