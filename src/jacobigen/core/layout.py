"""Where an image's (or a video's) tokens sit in the generated sequence, and which of them are not
free choices."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch

from .errors import ConfigError


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


@dataclass(frozen=True)
class ImageLayout:
    """A rows x cols grid in raster order, optionally with an end-of-line id after each row and an
    end-of-image id after the grid. ``image_ids`` is the half-open id range a grid cell may take;
    ``header`` holds tokens every image starts with (image-start, size tokens), appended to prompts.
    """

    rows: int
    cols: int
    image_ids: tuple[int, int]
    eol_id: int | None = None
    end_id: int | None = None
    header: tuple[int, ...] = ()

    def __post_init__(self):
        for name in ("rows", "cols"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"layout {name} must be an int, got {value!r}")
        ids = self.image_ids
        if not (isinstance(ids, (tuple, list)) and len(ids) == 2 and all(_is_int(i) for i in ids)):
            raise ConfigError(f"layout image_ids must be a (first, end) pair of ints, got {ids!r}")
        for name in ("eol_id", "end_id"):
            if getattr(self, name) is not None and not _is_int(getattr(self, name)):
                raise ConfigError(f"layout {name} must be an int or None, got {getattr(self, name)!r}")
        if not all(_is_int(t) and t >= 0 for t in self.header):
            raise ConfigError(f"layout header must hold token ids (ints >= 0), got {self.header!r}")
        lo, hi = ids
        if self.rows < 1 or self.cols < 1:
            raise ConfigError(f"layout needs at least one row and column, got {self.rows}x{self.cols}")
        if not 0 <= lo < hi:
            raise ConfigError(f"image id range [{lo}, {hi}) is empty or negative")
        for name, tok in (("eol_id", self.eol_id), ("end_id", self.end_id)):
            if tok is not None and lo <= tok < hi:
                raise ConfigError(f"{name}={tok} lies inside the image id range [{lo}, {hi})")

    frames = 1  # an image is a one-frame clip: the methods below serve both layouts
    eof_id = cast("int | None", None)  # a class attribute, not a field; VideoLayout's field may hold an id

    @property
    def row_length(self) -> int:
        return self.cols + (self.eol_id is not None)

    @property
    def frame_length(self) -> int:
        """Tokens of one frame: its rows, then the end-of-frame id when the layout has one."""
        return self.rows * self.row_length + (self.eof_id is not None)

    @property
    def repeat_offset(self) -> int:
        """How far back the same cell lies: one frame in a clip of several frames, else one row."""
        return self.frame_length if self.frames > 1 else self.row_length

    @property
    def length(self) -> int:
        """Number of generated tokens, structural ones included."""
        return self.frames * self.frame_length + (self.end_id is not None)

    @property
    def cells(self) -> int:
        """Free grid cells: the tokens the model chooses."""
        return self.frames * self.rows * self.cols

    def forced(self, device=None) -> torch.Tensor:
        """Token id forced at each generated position, -1 where the model chooses."""
        pos = torch.arange(self.length, device=device)
        within = pos % self.frame_length
        inside = pos < self.frames * self.frame_length
        out = torch.full((self.length,), -1, dtype=torch.int64, device=device)
        if self.eol_id is not None:
            out[inside & (within < self.rows * self.row_length) & (within % self.row_length == self.cols)] = self.eol_id
        if self.eof_id is not None:
            out[inside & (within == self.rows * self.row_length)] = self.eof_id
        if self.end_id is not None:
            out[-1] = self.end_id
        return out

    def id_span(self, vocab_size: int) -> tuple[int, int]:
        """The range [lo, hi) of the ids an image can hold, free or forced: targets and draws are
        computed within it (an image's ids are often a fraction of the vocabulary: 1,027 of the
        embedded model's 5,422), every id outside has probability 0."""
        lo, hi = self.image_ids
        forced = [t for t in (self.eol_id, self.end_id, self.eof_id) if t is not None]
        return min([lo, *forced]), min(max([hi, *(t + 1 for t in forced)]), vocab_size)

    def allowed(self, vocab_size: int, device=None) -> torch.Tensor:
        """Boolean [V] mask of ids a free grid cell may take."""
        lo, hi = self.image_ids
        if hi > vocab_size:
            raise ConfigError(f"image id range [{lo}, {hi}) exceeds the model vocabulary ({vocab_size})")
        mask = torch.zeros(vocab_size, dtype=torch.bool, device=device)
        mask[lo:hi] = True
        return mask

    def frame_grids(self, tokens: torch.Tensor) -> torch.Tensor:
        """The cells [..., frames, rows, cols] of generated sequences [..., length]."""
        lead = tokens.shape[:-1]
        body = tokens[..., : self.frames * self.frame_length].reshape(*lead, self.frames, self.frame_length)
        rows = body[..., : self.rows * self.row_length].reshape(*lead, self.frames, self.rows, self.row_length)
        return rows[..., : self.cols]

    def grid(self, tokens: torch.Tensor) -> torch.Tensor:
        """The image cells [..., rows, cols] of generated sequences [..., length]."""
        return self.frame_grids(tokens)[..., 0, :, :]

    def tiled(self, tokens: torch.Tensor) -> torch.Tensor:
        """The cells [..., rows, frames * cols] of generated sequences: frames side by side (an
        acceptance map of a clip shows where whole frames were copied)."""
        cells = self.frame_grids(tokens)
        return cells.transpose(-3, -2).reshape(*cells.shape[:-3], self.rows, self.frames * self.cols)

    def lines(self, device=None) -> Lines:
        """The grid's rows in raster order, frame after frame (what PJD runs in parallel)."""
        f, r = torch.meshgrid(
            torch.arange(self.frames, device=device), torch.arange(self.rows, device=device), indexing="ij"
        )
        f, r = f.flatten(), r.flatten()
        length = torch.full_like(f, self.row_length)
        length += (r == self.rows - 1) & (self.eof_id is not None)
        length[-1] += self.end_id is not None
        return Lines(f * self.frame_length + r * self.row_length, length, (r == 0) & (f > 0))


@dataclass(frozen=True)
class Lines:
    """Rows of a layout as spans of the generated sequence: a row owns its cells, its end-of-line id
    and the end ids that close it (end of frame, end of the whole sequence), so the spans tile it."""

    start: torch.Tensor  # [N] raster position of each row's first cell
    length: torch.Tensor  # [N] tokens it owns
    opens_frame: torch.Tensor  # [N] first row of a frame after the first: no row above it in its frame


@dataclass(frozen=True)
class VideoLayout(ImageLayout):
    """``frames`` images of rows x cols in a row, each followed by the end-of-frame id ``eof_id``
    when there is one; ``end_id`` closes the clip. Grids are [..., frames, rows, cols]."""

    frames: int = 1
    eof_id: int | None = None

    def __post_init__(self):
        super().__post_init__()
        lo, hi = self.image_ids
        if isinstance(self.frames, bool) or not isinstance(self.frames, int) or self.frames < 1:
            raise ConfigError(f"a video layout needs at least one frame, got {self.frames!r}")
        if self.eof_id is not None and lo <= self.eof_id < hi:
            raise ConfigError(f"eof_id={self.eof_id} lies inside the image id range [{lo}, {hi})")

    def grid(self, tokens: torch.Tensor) -> torch.Tensor:
        """The clip's cells [..., frames, rows, cols] of generated sequences [..., length]."""
        return self.frame_grids(tokens)
