"""Where an image's tokens sit in the generated sequence, and which of them are not free choices."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import ConfigError


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
        lo, hi = self.image_ids
        if self.rows < 1 or self.cols < 1:
            raise ConfigError(f"layout needs at least one row and column, got {self.rows}x{self.cols}")
        if not 0 <= lo < hi:
            raise ConfigError(f"image id range [{lo}, {hi}) is empty or negative")
        for name, tok in (("eol_id", self.eol_id), ("end_id", self.end_id)):
            if tok is not None and lo <= tok < hi:
                raise ConfigError(f"{name}={tok} lies inside the image id range [{lo}, {hi})")

    @property
    def row_length(self) -> int:
        return self.cols + (self.eol_id is not None)

    @property
    def length(self) -> int:
        """Number of generated tokens, structural ones included."""
        return self.rows * self.row_length + (self.end_id is not None)

    def forced(self, device=None) -> torch.Tensor:
        """Token id forced at each generated position, -1 where the model chooses."""
        out = torch.full((self.length,), -1, dtype=torch.int64, device=device)
        if self.eol_id is not None:
            out[self.cols:self.rows * self.row_length:self.row_length] = self.eol_id
        if self.end_id is not None:
            out[-1] = self.end_id
        return out

    def allowed(self, vocab_size: int, device=None) -> torch.Tensor:
        """Boolean [V] mask of ids a free grid cell may take."""
        lo, hi = self.image_ids
        if hi > vocab_size:
            raise ConfigError(f"image id range [{lo}, {hi}) exceeds the model vocabulary ({vocab_size})")
        mask = torch.zeros(vocab_size, dtype=torch.bool, device=device)
        mask[lo:hi] = True
        return mask

    def grid(self, tokens: torch.Tensor) -> torch.Tensor:
        """The image cells [..., rows, cols] of generated sequences [..., length]."""
        body = tokens[..., :self.rows * self.row_length]
        return body.reshape(*tokens.shape[:-1], self.rows, self.row_length)[..., :self.cols]
