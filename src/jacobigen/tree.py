"""Window shapes: a chain of drafts, optionally with SJD-PAC's proactive tree at its head.

The window drafts depths 1..W after the last committed token (the root). The first D depths may be
a full K-ary tree: every node at depth t has K children carrying the same K candidate tokens for
depth t+1, drawn without replacement (siblings). The remaining depths form a chain hanging from the
*spine*, the path of first candidates. With D = 0 (or K = 1) the window is the plain SJD chain.

Everything here is static per decoder (shared by all sequences): node depths, the block position of
each node, the tree attention structure, and the block index of the spine node at every depth.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from .draws import Draws
from .rng import Stream


@dataclass(frozen=True)
class WindowShape:
    drafts: int     # W: depths drafted per iteration (window - 1)
    depth: int = 0  # D: tree depths at the head of the window
    width: int = 1  # K: candidates per tree depth

    @property
    def tree(self) -> bool:
        return self.depth > 0 and self.width > 1

    def level_start(self, t: int) -> int:
        """Block index of the first node at tree depth t (the root is block index 0)."""
        return 1 + sum(self.width ** i for i in range(1, t))

    @property
    def size(self) -> int:
        """Block length: root, tree nodes, chain nodes."""
        if not self.tree:
            return 1 + self.drafts
        return self.level_start(self.depth + 1) + self.drafts - self.depth

    def node_depth(self) -> torch.Tensor:
        if not self.tree:
            return torch.arange(self.size)
        d = [0] + [t for t in range(1, self.depth + 1) for _ in range(self.width ** t)]
        return torch.tensor(d + list(range(self.depth + 1, self.drafts + 1)))

    def parent(self) -> torch.Tensor:
        par = [-1]
        if self.tree:
            for t in range(1, self.depth + 1):
                up = self.level_start(t - 1) if t > 1 else 0
                par += [up + a // self.width for a in range(self.width ** t)]
            leaf = self.level_start(self.depth)
            par += [leaf] + list(range(self.level_start(self.depth + 1), self.size - 1))
        else:
            par += list(range(self.size - 1))
        return torch.tensor(par)

    def structure(self, device=None) -> torch.Tensor:
        """[size, size] bool: node i attends to node j iff j is i or one of its ancestors."""
        par = self.parent().tolist()
        s = torch.eye(self.size, dtype=torch.bool)
        for i in range(self.size):
            a = par[i]
            while a >= 0:
                s[i, a] = True
                a = par[a]
        return s.to(device)

    def spine(self) -> torch.Tensor:
        """Block index of the spine node at depths 0..W (depth 0 is the root)."""
        if not self.tree:
            return torch.arange(self.size)
        tree = [0] + [self.level_start(t) for t in range(1, self.depth + 1)]
        return torch.tensor(tree + list(range(self.level_start(self.depth + 1), self.size)))

    def spine_on(self, device) -> torch.Tensor:
        """:meth:`spine` on a device, made once per shape and device."""
        return _spine_on(self, torch.device(device))

    def block_tokens(self, root: torch.Tensor, spine_tokens: torch.Tensor, cand: torch.Tensor) -> torch.Tensor:
        """Token of every block node [B, size] from the root [B], spine drafts [B, W] and the tree's
        candidates [B, D, K] (candidate rank r of depth t sits at every node a with a % K == r)."""
        if not self.tree:
            return torch.cat([root[:, None], spine_tokens], 1)
        levels = [cand[:, t - 1].repeat(1, self.width ** (t - 1)) for t in range(1, self.depth + 1)]
        return torch.cat([root[:, None], *levels, spine_tokens[:, self.depth:]], 1)


@functools.lru_cache(maxsize=64)
def _spine_on(shape: WindowShape, device: torch.device) -> torch.Tensor:
    return shape.spine().to(device)


class ProactiveTree:
    """SJD-PAC proactive drafting: at each tree depth, K candidates without replacement.

    Rank 0 is the drafter's own draft (marginally ~ q, whatever coupling produced it); ranks 1..K-1
    continue sampling without replacement from q with the earlier ranks removed (Gumbel top-k),
    which is the joint law the sibling verifier's renormalisation assumes.
    """

    def __init__(self, depth: int = 3, width: int = 4):
        self.depth, self.width = depth, width

    def expand(self, first: torch.Tensor, q: torch.Tensor, positions: torch.Tensor,
               draws: Draws) -> tuple[torch.Tensor, torch.Tensor]:
        """first [B, D] rank-0 drafts, q [B, D, V]. Returns candidates and validity [B, D, K]."""
        keys = q.clamp(min=0).log() + draws.gumbel(positions, q.shape[-1], Stream.TREE)
        keys = keys.scatter(-1, first[..., None], float("-inf"))
        rest = keys.topk(min(self.width - 1, q.shape[-1]), dim=-1)
        pad = self.width - 1 - rest.indices.shape[-1]
        cand = torch.cat([first[..., None], rest.indices, first[..., None].expand(*first.shape, pad)], -1)
        valid = torch.cat([torch.ones_like(first[..., None], dtype=torch.bool), rest.values > float("-inf"),
                           torch.zeros(*first.shape, pad, dtype=torch.bool, device=first.device)], -1)
        return cand, valid
