"""Token layout of the embedded emoji model (fixed: the shipped weights depend on it).

Sequence: [BOS] + caption bytes (<= 48) + [BOI] + 16 rows of (16 codes + EOL) + [EOI].
The unconditional prefix (used for CFG) is [BOS, BOI].
"""
from __future__ import annotations

CODEBOOK_SIZE = 1024  # image codes are ids [0, 1024)
GRID = 16  # 16 x 16 codes per image
EOL = 1024
BOI = 1025
EOI = 1026
BOS = 1027
PAD = 1028
BYTE_OFFSET = 1029  # caption byte b -> id 1029 + b
VOCAB_SIZE = BYTE_OFFSET + 256  # 1285
MAX_CAPTION_BYTES = 48
IMAGE_TOKENS = GRID * (GRID + 1) + 1  # rows with EOL, then EOI: 273
MAX_SEQ_LEN = 1 + MAX_CAPTION_BYTES + 1 + IMAGE_TOKENS  # 323
SAMPLING = {"cfg": 3.0, "temperature": 1.0, "top_k": 200}  # recommended (the command line's help shows it)


def caption_tokens(text: str) -> list[int]:
    """Prompt prefix for `text`: BOS, its UTF-8 bytes (lowercased, cut to 48), BOI."""
    data = text.strip().lower().encode("utf-8")[:MAX_CAPTION_BYTES]
    return [BOS, *(BYTE_OFFSET + b for b in data), BOI]


def unconditional_tokens() -> list[int]:
    return [BOS, BOI]


def image_tokens(codes) -> list[int]:
    """Grid of codes [16, 16] (nested lists or tensor) -> row-major ids with EOLs and EOI."""
    out: list[int] = []
    for row in codes:
        out.extend(int(c) for c in row)
        out.append(EOL)
    out.append(EOI)
    return out
