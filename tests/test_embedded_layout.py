"""The embedded model's token layout is frozen by its weights: pin every id."""
from jacobigen import embedded as E


def test_ids_and_sizes():
    assert (E.EOL, E.BOI, E.EOI, E.BOS, E.PAD, E.BYTE_OFFSET) == (1024, 1025, 1026, 1027, 1028, 1029)
    assert E.VOCAB_SIZE == 1285
    assert E.MAX_SEQ_LEN == 1 + 48 + 1 + 16 * 17 + 1


def test_caption_tokens():
    assert E.caption_tokens("Red Heart") == [E.BOS, *(E.BYTE_OFFSET + b for b in b"red heart"), E.BOI]
    assert len(E.caption_tokens("x" * 100)) == 48 + 2
    assert E.unconditional_tokens() == [E.BOS, E.BOI]


def test_image_tokens_layout():
    grid = [[r * 16 + c for c in range(16)] for r in range(16)]
    seq = E.image_tokens(grid)
    assert len(seq) == E.IMAGE_TOKENS
    assert seq[16] == E.EOL and seq[-2] == E.EOL and seq[-1] == E.EOI
    assert seq[17] == 16
