"""The Jacobi decoding loop (DESIGN.md section 3), batched over sequences.

One iteration: forward ``[last committed, drafts...]`` once, verify the drafts, commit the accepted
run plus one sampled token, keep their K/V, and let the drafter propose the next window from the
stale targets. Plain AR is the same loop with window 1 (no drafts).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from tqdm.auto import tqdm

from .drafters import Drafter, Slots
from .draws import Draws
from .errors import ConfigError
from .layout import ImageLayout
from .masks import block_mask, prefix_structure
from .mrs import gather_rows
from .rng import Stream
from .sampling import SamplingConfig, target_probs
from .stats import DecodeStats
from .tree import ProactiveTree, WindowShape
from .verifiers import Verifier, Window

if TYPE_CHECKING:
    from .pjd import RowParallel


@dataclass(frozen=True)
class Parts:
    drafter: Drafter
    verifier: Verifier
    window: int
    tree: ProactiveTree | None = None
    layout2d: RowParallel | None = None     # PJD's row-parallel layout (pjd.py), None: 1-D chain


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class JacobiDecoder:
    """Decodes B sequences of one layout; each advances by its own accepted length."""

    def __init__(self, model, layout: ImageLayout, sampling: SamplingConfig, parts: Parts):
        if parts.window < 1:
            raise ConfigError(f"window must be >= 1, got {parts.window}")
        self.model, self.layout, self.sampling, self.parts = model, layout, sampling, parts
        self.device = next(model.parameters()).device
        v = model.vocab_size
        self.allowed = layout.allowed(v, self.device)
        self.forced = layout.forced(self.device)
        self.uniform_prior = self.allowed.float() / self.allowed.sum()
        tree = parts.tree
        self.shape = WindowShape(parts.window - 1, min(tree.depth, parts.window - 1) if tree else 0,
                                 tree.width if tree else 1)
        self.forward_time = 0.0
        self.nfe = 0

    # --- model access -------------------------------------------------------------------------

    def _forward(self, rows_tokens, positions, structure, cache, cached=None) -> torch.Tensor:
        """One timed forward of a block; ``structure`` and ``cached`` as in :func:`block_mask`."""
        mask = block_mask(cache.lengths, cache.capacity, structure, cached)
        _sync(self.device)
        t0 = time.perf_counter()
        with torch.inference_mode():
            logits = self.model(rows_tokens, positions, mask, cache)
        _sync(self.device)
        self.forward_time += time.perf_counter() - t0
        self.nfe += 1
        return logits

    def _targets(self, logits: torch.Tensor, gen_positions: torch.Tensor) -> torch.Tensor:
        forced = self._forced_at(gen_positions)
        return target_probs(logits, self.sampling, self.allowed, forced)

    def _forced_at(self, gen_positions: torch.Tensor) -> torch.Tensor:
        inside = gen_positions < self.layout.length
        return torch.where(inside, self.forced[gen_positions.clamp(max=self.layout.length - 1)], -1)

    def prior(self, gen_positions: torch.Tensor) -> torch.Tensor:
        """Draft distribution for a position never evaluated: uniform over image ids, one-hot where
        the layout forces a token."""
        forced = self._forced_at(gen_positions)
        onehot = torch.nn.functional.one_hot(forced.clamp(min=0), self.allowed.numel()).float()
        return torch.where((forced >= 0)[..., None], onehot, self.uniform_prior)

    # --- the loop -----------------------------------------------------------------------------

    def run(self, prefixes: list[list[int]], seeds: list[int], progress: bool = False):
        """prefixes: one token list per model row (cond, uncond interleaved when guided);
        seeds: one per sequence. Returns (tokens [B, length], DecodeStats)."""
        t_start = time.perf_counter()
        b, length = len(seeds), self.layout.length
        shape = self.shape
        w = shape.drafts
        group, prefixes, base, cache, draws, stats = self._start(prefixes, seeds, shape.size, w)
        bar = tqdm(total=b * length, disable=not progress, unit="tok", desc="decoding")

        tokens = torch.zeros(b, length + w + 1, dtype=torch.int64, device=self.device)
        tokens[:, 0] = self._prefill(prefixes, base, cache, draws)
        n = torch.ones(b, dtype=torch.int64, device=self.device)
        stats.record(n, torch.ones_like(n, dtype=torch.bool))
        bar.update(b)
        arange_w = torch.arange(w, device=self.device)
        no = torch.zeros(b, w, dtype=torch.bool, device=self.device)
        window = self._draft(Slots(n[:, None] + arange_w, self.prior(n[:, None] + arange_w), no,
                                   torch.zeros(b, w, dtype=torch.int64, device=self.device),
                                   torch.zeros(b, w, self.allowed.numel(), device=self.device), no), draws)
        structure, spine = shape.structure(self.device), shape.spine().to(self.device)
        node_depth = shape.node_depth().to(self.device)

        while bool((n < length).any()):
            active = n < length
            draws = Draws(draws.seeds, draws.iteration + active)
            block = shape.block_tokens(tokens.gather(1, (n - 1)[:, None]).squeeze(1), window.tokens, window.cand)
            node_pos = (n - 1)[:, None] + node_depth                       # generated position per node
            logits = self._forward(block.repeat_interleave(group, 0),
                                   base[:, None] + node_pos.repeat_interleave(group, 0), structure, cache)
            p = self._targets(logits, node_pos + 1)       # p[:, i]: target right after block node i
            m = (length - n - 1).clamp(0, w)
            depth_pos = n[:, None] + torch.arange(w + 1, device=self.device)
            k, nxt, path = self.parts.verifier.verify(p, window, shape, m, depth_pos, draws)
            k = torch.where(active, k, 0)

            # commit the accepted path and the sampled token, keep their K/V (entries past the
            # path land in slots that later commits overwrite; finished sequences write into slack)
            tokens.scatter_(1, n[:, None] + arange_w, block.gather(1, path[:, 1:]))
            tokens.scatter_(1, (n + k)[:, None], nxt[:, None])
            step = (k + 1) * active
            cache.commit(path.repeat_interleave(group, 0), step.repeat_interleave(group))
            stats.record(step, active)
            bar.update(int(step.sum()))
            n = n + step

            # the next window: slot i holds position n + i; stale targets come from the spine
            if w:
                j = arange_w + step[:, None]
                has_p = (j <= w) & active[:, None]
                belief = torch.where(has_p[..., None], gather_rows(p[:, spine], j.clamp(max=w)),
                                     self.prior(n[:, None] + arange_w))
                jo = j.clamp(max=w - 1)
                window = self._draft(Slots(n[:, None] + arange_w, belief, has_p, window.tokens.gather(1, jo),
                                           gather_rows(window.q, jo), (j < w) & active[:, None]), draws)

        bar.close()
        stats.finish(nfe=self.nfe, wall=time.perf_counter() - t_start, forward=self.forward_time)
        return tokens[:, :length], stats

    def _start(self, prefixes, seeds, block: int, slots: int):
        """Check the prompts, append the layout header, make a cache with room for ``block`` new
        tokens past the image, reset the parts. Returns (group, prefixes, base lengths, cache,
        draws at iteration 0, stats)."""
        group = 2 if self.sampling.guided else 1
        b, length = len(seeds), self.layout.length
        if len(prefixes) != b * group:
            raise ConfigError(f"expected {b * group} prefixes for {b} sequences, got {len(prefixes)}")
        prefixes = [list(p) + list(self.layout.header) for p in prefixes]
        base = torch.tensor([len(p) for p in prefixes], device=self.device)
        if int(base.max()) + length > self.model.max_seq_len:
            raise ConfigError(f"prompt of {int(base.max())} tokens plus {length} image tokens exceeds "
                              f"the model's context of {self.model.max_seq_len}")
        if int(base.min()) < 1:
            raise ConfigError("every prompt needs at least one token")
        cache = self.model.new_cache(b * group, int(base.max()) + length + block)
        draws = Draws(torch.tensor(seeds, dtype=torch.int64, device=self.device),
                      torch.zeros(b, dtype=torch.int64, device=self.device))
        self.parts.drafter.start(b, slots, self.allowed.numel(), self.device)
        self.parts.verifier.bind(self.model, self.layout)
        return group, prefixes, base, cache, draws, DecodeStats.start(b)

    def _prefill(self, prefixes, base, cache, draws) -> torch.Tensor:
        """One forward over all prompts; returns the first generated token per sequence."""
        width = int(base.max())
        rows = torch.zeros(len(prefixes), width, dtype=torch.int64, device=self.device)
        for r, pre in enumerate(prefixes):
            rows[r, :len(pre)] = torch.tensor(pre, device=self.device)
        if int(rows.max()) >= self.model.vocab_size or int(rows.min()) < 0:
            raise ConfigError(f"prompt token ids must lie in [0, {self.model.vocab_size})")
        positions = torch.arange(width, device=self.device).expand_as(rows)
        logits = self._forward(rows, positions, prefix_structure(base, width), cache)
        last = logits[torch.arange(len(prefixes)), base - 1][:, None]
        cache.commit(torch.arange(width, device=self.device).expand_as(rows), base)
        zero = torch.zeros(draws.seeds.shape[0], 1, dtype=torch.int64, device=self.device)
        p0 = self._targets(last, zero)[:, 0]
        return draws.sample(p0, zero[:, 0], Stream.SAMPLE)

    def _draft(self, slots: Slots, draws: Draws) -> Window:
        b, w = slots.positions.shape
        if w:
            tokens, q = self.parts.drafter.draft(slots, draws)
        else:
            tokens, q = slots.old_tokens, slots.old_q
        d = self.shape.depth if self.shape.tree else 0
        if d:
            cand, valid = self.parts.tree.expand(tokens[:, :d], q[:, :d], slots.positions[:, :d], draws)
        else:
            cand = torch.zeros(b, 0, 1, dtype=torch.int64, device=self.device)
            valid = torch.zeros(b, 0, 1, dtype=torch.bool, device=self.device)
        return Window(tokens, q, cand, valid)
