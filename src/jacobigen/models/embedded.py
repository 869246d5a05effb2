"""Token layout of the embedded emoji model (fixed: the shipped weights depend on it).

Sequence: [BOS] + caption tokens + [BOI] + 16 rows of (16 codes + EOL) + [EOI]; the unconditional
prefix (used for CFG) is [BOS, BOI]. How a caption becomes tokens belongs to the weights:

- :class:`ByteCaptions` (the shipped model): its UTF-8 bytes, lowercased, at most 48.
- :class:`WordCaptions` (an export with a ``words.json`` beside ``ar.safetensors``): lowercase words,
  each one id of that vocabulary (unknown words read as UNK), at most 16. Whole words, so "red" or
  "face" is one token shared by hundreds of training images.
- :class:`NamedCaptions` (an export with a ``names.json`` too): the prompt read as the known name
  that fits it best (:mod:`jacobigen.models.names`), then as words.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..core.errors import WeightsError
from .names import KnownNames

CODEBOOK_SIZE = 1024  # image codes are ids [0, 1024)
GRID = 16  # 16 x 16 codes per image
EOL = 1024
BOI = 1025
EOI = 1026
BOS = 1027
PAD = 1028
BYTE_OFFSET = 1029  # byte captions: byte b -> id 1029 + b
UNK = 1029  # word captions: a word outside the vocabulary
WORD_OFFSET = 1030  # word captions: the vocabulary's i-th word -> id 1030 + i
IMAGE_TOKENS = GRID * (GRID + 1) + 1  # rows with EOL, then EOI: 273
CLIP_FRAME_TOKENS = GRID * (GRID + 1) + 1  # in a clip: rows with EOL, then EOF: 273
# The transformer's dtype by default (``--dtype`` chooses another): bfloat16 on a CPU with native bf16
# (AVX512-BF16 or AMX), where a block costs much less against a single token than in float32 and every
# lossless preset ran faster than its float32 self (docs/results.md, "Block cost by dtype"); float32
# elsewhere (and on CUDA, not measured there yet). The target is then that dtype's model.
DTYPE = "float32"
NATIVE_BF16_DTYPE = "bfloat16"
SAMPLING = {"cfg": 3.0, "temperature": 1.0, "top_k": 200}  # recommended (the command line's help shows it)
# A model fitted to the curated names (a names.json beside its weights; training/vocabulary.py) draws each
# name's one picture: its conditional and unconditional branches are both sharp, so cfg 3 extrapolates
# between two pictures into fragments (model card, run 11), and cfg 1 (one forward row, not a CFG pair) is
# what draws the name.
NAMES_SAMPLING = {"cfg": 1.0, "temperature": 0.5, "top_k": 50}
# Clips sample with a nucleus, as Cosmos-1-AR does (0.9 for its 12B model, 0.8 for its 4B, the setting of
# SCD's Cosmos runs): top-k 200's tail lets each frame drift from the last, and the drift compounds
# over eight frames. At 0.8 this small model left 7 of 16 clips blank (under 2% ink in frame 1), 0.9 one.
VIDEO_SAMPLING = {"cfg": 3.0, "temperature": 1.0, "top_p": 0.9}
# The clip model of the curated names (emoji-names-video): at cfg 1 its first frame often misses the name
# (2 of 4 "red heart drifting left" clips blank), cfg 3 at temperature 0.3 draws a heart in 4 of 4 seeds,
# each moving left (training/README.md, "Clips of the curated names").
NAMES_VIDEO_SAMPLING = {"cfg": 3.0, "temperature": 0.3, "top_k": 50}
_WORD = re.compile(r"[^\W_]+")


class ByteCaptions:
    """A caption as its UTF-8 bytes (lowercased, stripped, cut to 48)."""

    max_tokens = 48
    vocab_size = BYTE_OFFSET + 256  # 1285

    def tokens(self, text: str) -> list[int]:
        return [BOS, *(BYTE_OFFSET + b for b in text.strip().lower().encode("utf-8")[: self.max_tokens]), BOI]

    def note(self, text: str) -> str | None:
        return byte_note(text, self.max_tokens)


class WordCaptions:
    """A caption as words of a fixed vocabulary (:func:`caption_words`), UNK where unknown."""

    max_tokens = 16

    def __init__(self, words: list[str]):
        self.words = list(words)
        self.ids = {w: WORD_OFFSET + i for i, w in enumerate(self.words)}
        self.vocab_size = WORD_OFFSET + len(self.words)

    @classmethod
    def load(cls, path: Path) -> WordCaptions:
        """A training export's words.json: ``{"words": [word, ...]}``; anything else is a WeightsError."""
        try:
            words = json.loads(Path(path).read_text(encoding="utf-8")).get("words")
        except (OSError, ValueError, AttributeError) as e:
            raise WeightsError(f"{path} is not a words.json of a training export ({e})") from None
        if not isinstance(words, list) or not words or not all(isinstance(w, str) for w in words):
            raise WeightsError(f'{path} must hold {{"words": [word, ...]}} (a non-empty list of strings)')
        return cls(words)

    def tokens(self, text: str) -> list[int]:
        return [BOS, *(self.ids.get(w, UNK) for w in caption_words(text)[: self.max_tokens]), BOI]

    def note(self, text: str) -> str | None:
        """Why the model will not read all of `text` (unknown or surplus words), or None."""
        words = caption_words(text)
        unknown = [w for w in dict.fromkeys(words[: self.max_tokens]) if w not in self.ids]
        notes = [f"reads only its first {self.max_tokens} words"] if len(words) > self.max_tokens else []
        if unknown:
            notes.append(
                f"never saw {', '.join(map(repr, unknown[:5]))}{' ...' if len(unknown) > 5 else ''}"
                " (read as an unknown word)"
            )
        return "; ".join(notes) or None


class NamedCaptions(WordCaptions):
    """Word captions of a model trained on a curated set of names: each prompt conditions on the
    known name that fits it ("a red cat" on ``cat``), the only captions the model learned to draw."""

    def __init__(self, words: list[str], names: KnownNames):
        super().__init__(words)
        self.names = names

    def tokens(self, text: str) -> list[int]:
        return super().tokens(self.names.fit(text) or text)

    def note(self, text: str) -> str | None:
        return self.names.note(text)


def byte_note(text: str, limit: int) -> str | None:
    """Why an encoder reading a prompt's first `limit` UTF-8 bytes will not read all of `text`, or None."""
    size = len(text.strip().encode())
    return f"reads only the first {limit} of its {size} bytes" if size > limit else None


def caption_words(text: str) -> list[str]:
    """The words a caption is read as: lowercase runs of letters and digits ("Man's hat!" ->
    man, s, hat); training and generation both read captions through this."""
    return _WORD.findall(text.lower())


def captions_for(weights: Path) -> ByteCaptions | WordCaptions:
    """The caption reader the weights in this folder were trained with."""
    words, names = Path(weights) / "words.json", Path(weights) / "names.json"
    if not words.is_file():
        return ByteCaptions()
    reader = WordCaptions.load(words)
    return NamedCaptions(reader.words, KnownNames.load(names, caption_words)) if names.is_file() else reader


def sampling_for(weights: Path) -> dict:
    """The recommended sampling of the image model in this folder."""
    return dict(NAMES_SAMPLING if (Path(weights) / "names.json").is_file() else SAMPLING)


def max_seq_len(captions: ByteCaptions | WordCaptions) -> int:
    return 1 + captions.max_tokens + 1 + IMAGE_TOKENS


def unconditional_tokens() -> list[int]:
    return [BOS, BOI]


def frame_tokens(codes) -> list[int]:
    """Grid of codes [16, 16] (nested lists or tensor) -> row-major ids, EOL after each row."""
    out: list[int] = []
    for row in codes:
        out.extend(int(c) for c in row)
        out.append(EOL)
    return out


def image_tokens(codes) -> list[int]:
    """An image's generated tokens: its frame, then EOI."""
    return [*frame_tokens(codes), EOI]


def clip_tokens(frames, eof: int) -> list[int]:
    """A clip's generated tokens: each frame followed by the end-of-frame id `eof`, then EOI. The
    emoji video model's `eof` is the first id after its caption reader's (``reader.vocab_size``)."""
    return [*(t for f in frames for t in (*frame_tokens(f), eof)), EOI]


def clip_seq_len(captions: ByteCaptions | WordCaptions, frames: int) -> int:
    return 1 + captions.max_tokens + 1 + frames * CLIP_FRAME_TOKENS + 1


def clip_frames(captions: ByteCaptions | WordCaptions, max_seq_len: int) -> int:
    """The longest clip a video model's positions hold."""
    return (max_seq_len - 3 - captions.max_tokens) // CLIP_FRAME_TOKENS
