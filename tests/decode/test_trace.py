"""The acceptance map: which iteration committed each token (stats.when)."""

import pytest
import torch

from jacobigen import generate
from jacobigen.tools.exactness import layout, tiny_model

LAYOUT = layout(True, rows=4, cols=6)
KW = dict(layout=LAYOUT, seed=list(range(4)), cfg=2.0, uncond=[7], window=8)


@pytest.fixture(scope="module")
def model():
    return tiny_model(sharpness=3.0)


@pytest.mark.parametrize("method", ["ar", "sjd", "scd-gs", "sjd-pac", "pjd+scd-mc", "pjd+scd-mc+pac"])
def test_every_token_has_the_iteration_that_committed_it(model, method):
    g = generate(model, [5, 6], method=method, batch_size=3, **KW)
    when = g.stats.when
    assert when.shape == g.tokens.shape and (when >= 0).all() and (when[:, 0] == 0).all()
    assert when.max(1).values.tolist() == [n - 1 for n in g.stats.sequence_nfe]
    counts = [torch.bincount(w, minlength=int(w.max()) + 1)[1:] for w in when]
    assert sorted(torch.cat(counts).tolist()) == sorted(g.stats.committed)
    if not method.startswith("pjd"):  # a chain commits a prefix each time
        assert (when.diff(dim=1) >= 0).all()
    alone = generate(model, [5, 6], method=method, batch_size=1, **KW)
    assert torch.equal(alone.stats.when, when)
