"""The embedded model's token layout is frozen by its weights: pin every id, and both caption readers."""

import json

import pytest

from jacobigen.core.errors import WeightsError
from jacobigen.models import WEIGHTS, embedded_bundle
from jacobigen.models import embedded as E


def test_ids_and_sizes():
    assert (E.EOL, E.BOI, E.EOI, E.BOS, E.PAD) == (1024, 1025, 1026, 1027, 1028)
    assert (E.BYTE_OFFSET, E.UNK, E.WORD_OFFSET) == (1029, 1029, 1030)
    assert E.ByteCaptions.vocab_size == 1285
    assert E.max_seq_len(E.ByteCaptions()) == 1 + 48 + 1 + 16 * 17 + 1
    assert E.max_seq_len(E.WordCaptions(["red"])) == 1 + 16 + 1 + 16 * 17 + 1


def test_byte_captions():
    reader = E.ByteCaptions()
    assert reader.tokens("Red Heart") == [E.BOS, *(E.BYTE_OFFSET + b for b in b"red heart"), E.BOI]
    assert len(reader.tokens("x" * 100)) == 48 + 2
    assert reader.note("red heart") is None and "48 of its 100 bytes" in reader.note("x" * 100)


def test_caption_words_are_lowercase_letter_and_digit_runs():
    assert E.caption_words("Man's  HAT, 2nd-place!") == ["man", "s", "hat", "2nd", "place"]
    assert E.caption_words("piñata") == ["piñata"]
    assert E.caption_words(" _ ") == []


def test_word_captions():
    reader = E.WordCaptions(["red", "heart"])
    assert reader.vocab_size == 1032
    assert reader.tokens("Red Heart") == [E.BOS, 1030, 1031, E.BOI]
    assert reader.tokens("red zebra") == [E.BOS, 1030, E.UNK, E.BOI]
    assert len(reader.tokens("red " * 40)) == 16 + 2
    assert reader.note("red heart") is None
    assert "'zebra'" in reader.note("red zebra")
    assert "first 16 words" in reader.note("red " * 17)
    assert E.unconditional_tokens() == [E.BOS, E.BOI]


def test_the_weights_folder_chooses_the_reader(tmp_path):
    assert isinstance(E.captions_for(tmp_path), E.ByteCaptions)
    (tmp_path / "words.json").write_text(json.dumps({"words": ["red", "heart"]}))
    reader = E.captions_for(tmp_path)
    assert isinstance(reader, E.WordCaptions) and reader.words == ["red", "heart"]


def test_shipped_weights_match_their_reader():
    pipe = embedded_bundle()
    assert pipe.model.vocab_size == E.captions_for(WEIGHTS).vocab_size
    assert pipe.encode("red heart").cond == [E.captions_for(WEIGHTS).tokens("red heart")]


def test_mismatched_reader_is_a_weights_error(tmp_path):
    (tmp_path / "ar.safetensors").symlink_to(WEIGHTS / "ar.safetensors")
    (tmp_path / "words.json").write_text(json.dumps({"words": ["red"]}))
    with pytest.raises(WeightsError, match="words.json"):
        embedded_bundle(tmp_path)


def test_image_tokens_layout():
    grid = [[r * 16 + c for c in range(16)] for r in range(16)]
    seq = E.image_tokens(grid)
    assert len(seq) == E.IMAGE_TOKENS
    assert seq[16] == E.EOL and seq[-2] == E.EOL and seq[-1] == E.EOI
    assert seq[17] == 16
