"""The frame-copy drafter: its source is the committed token one frame (clip) or one row (image)
back, drafted as a point mass; elsewhere the drafter it wraps drafts. Its exactness and mutant live
in tests/decode/test_exactness.py."""

import pytest
import torch

from jacobigen import ConfigError, generate, get_method
from jacobigen.core.draws import Draws
from jacobigen.core.layout import ImageLayout, VideoLayout
from jacobigen.parts.drafters import Copy, Independent, Slots, earlier
from tests.helpers.models import LAYOUT, PROMPT, random_model


def test_the_source_is_one_row_back_in_an_image_and_one_frame_back_in_a_clip():
    image = ImageLayout(4, 5, (0, 10), eol_id=10, end_id=11)
    clip = VideoLayout(4, 5, (0, 10), eol_id=10, end_id=11, frames=3, eof_id=12)
    assert image.repeat_offset == 6 and clip.repeat_offset == 4 * 6 + 1
    assert VideoLayout(4, 5, (0, 10), frames=1).repeat_offset == 5  # one frame: the row above


def test_earlier_reads_only_committed_tokens():
    board = torch.arange(20).reshape(2, 10)
    positions = torch.tensor([[3, 4, 5, 6], [3, 4, 5, 6]])
    committed = torch.tensor([[5], [2]])
    got = earlier(board, positions, 2, lambda at: at < committed)
    assert got.tolist() == [[1, 2, 3, 4], [11, -1, -1, -1]]  # the second row has 2 tokens committed


def _slots(previous, belief, has_belief):
    b, w, v = belief.shape
    zeros = torch.zeros(b, w, dtype=torch.int64)
    return Slots(zeros + 7, belief, has_belief, zeros, belief, has_belief, None, previous)


def test_a_source_is_drafted_as_a_point_mass_where_the_slot_has_no_belief_yet():
    belief = torch.full((1, 4, 4), 0.25)
    slots = _slots(torch.tensor([[2, -1, 0, 3]]), belief, torch.tensor([[True, True, False, False]]))
    tokens, q = Copy(Independent()).draft(slots, Draws(torch.tensor([0]), torch.tensor([0])))
    assert tokens[0, 2] == 0 and tokens[0, 3] == 3
    assert q[0, 2].tolist() == [1, 0, 0, 0] and q[0, 3].tolist() == [0, 0, 0, 1]
    assert torch.equal(q[0, 0], belief[0, 0])  # a belief: the base's coupled draft, not the copy
    assert torch.equal(q[0, 1], belief[0, 1])  # no source: the base's draw from the belief
    tokens, q = Copy(Independent(), min_p=0).draft(slots, Draws(torch.tensor([0]), torch.tensor([0])))
    assert tokens[0, 0] == 2 and q[0, 0].tolist() == [0, 0, 1, 0]  # min_p 0: wherever there is a source


def test_min_p_keeps_the_base_where_the_belief_doubts_the_source():
    belief = torch.tensor([[[0.7, 0.1, 0.1, 0.1], [0.7, 0.1, 0.1, 0.1], [0.7, 0.1, 0.1, 0.1]]])
    slots = _slots(torch.tensor([[0, 1, 1]]), belief, torch.tensor([[True, True, False]]))
    _, q = Copy(Independent(), min_p=0.5).draft(slots, Draws(torch.tensor([0]), torch.tensor([0])))
    assert q[0, 0, 0] == 1  # p(source) = 0.7: copied
    assert torch.equal(q[0, 1], belief[0, 1])  # p(source) = 0.1: the base drafts
    assert q[0, 2, 1] == 1  # no model belief yet: copied
    with pytest.raises(ConfigError, match="copy_min_p"):
        Copy(Independent(), min_p=2)


@pytest.mark.parametrize("method", ["copy", "scd-gs+copy", "scd-mc+pac+copy"])
def test_greedy_copy_returns_ar_tokens(method):
    model = random_model()
    ar = generate(model, PROMPT, layout=LAYOUT, method="ar", top_k=1)
    got = generate(model, PROMPT, layout=LAYOUT, method=method, window=8, top_k=1)
    assert torch.equal(got.tokens, ar.tokens)


def test_copy_is_a_lossless_wrapper_in_any_order():
    assert get_method("copy+scd-mc").parts_text == "scd-mc+copy" and get_method("copy").lossless
