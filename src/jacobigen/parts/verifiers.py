"""Verifiers: which drafts of a window are committed, and the token that follows them.

:class:`Verifier` is exact modified rejection sampling. It walks the window from the root: at the
proactive tree's depths it tests the K sibling candidates one after another (recursive rejection:
after a rejection the target becomes the residual and the rejected candidate leaves q), then it
runs along the chain with the vectorised first-rejection rule. The first depth where nothing passes
gets a draw from the residual; if everything passed, a bonus draw from the next target. Relaxed
(lossy) verifiers change only :meth:`Verifier.accept` and :meth:`Verifier.residual`.

:class:`SameAsAr` (``invariant``) changes only the targets it is handed: each becomes the point mass
at ``ar``'s own choice there, ``argmax(log p + g)`` with the Gumbel noise fixed per (seed, position,
id) (:meth:`Draws.choose`). Rejection sampling against a point mass keeps a draft iff it is that
token, and its residual is the point mass again, so the same walk (chain, tree, rows) commits
exactly ``ar``'s tokens for the seed, whatever drafted them (docs/DESIGN.md §10).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..core.draws import Draws
from ..core.mrs import accepts, residual
from ..core.registry import register
from ..core.rng import Stream, categorical
from .tree import TreeNodes


@dataclass
class Window:
    """Drafts in flight: the spine draft per depth, with q, and the tree's sibling candidates."""

    tokens: torch.Tensor  # [B, W] spine drafts for depths 1..W (model ids)
    q: torch.Tensor  # [B, W, V] distribution each spine draft was drawn from (a table over the id span)
    cand: torch.Tensor  # [B, D, K] candidates per tree depth (rank 0 = spine draft)
    cand_valid: torch.Tensor  # [B, D, K] False where q had fewer than K ids to offer


def without(q: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """q with ``columns`` removed and renormalised (the law of the next draw without replacement)."""
    q = q.scatter(-1, columns[:, None], 0.0)
    mass = q.sum(-1, keepdim=True)
    return torch.where(mass > 0, q / mass.clamp(min=torch.finfo(q.dtype).tiny), q)


def _constant(make: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``make(*args)``, made once per arguments; a compiled step builds it inside its graph (dynamo
    would warn about the cache and trace through it anyway). A captured step reads the cached one:
    made at its first, uncaptured step, so no host-to-device copy happens inside a capture."""
    cached = functools.lru_cache(maxsize=64)(make)
    return lambda *args: make(*args) if torch.compiler.is_compiling() else cached(*args)


_arange = _constant(lambda n, device: torch.arange(n, device=device))
_streams = _constant(lambda device: torch.tensor([Stream.ACCEPT, Stream.SAMPLE], device=device))


@register("mrs", "verifier", "exact modified rejection sampling: first rejection, residual draw")
class Verifier:
    name = "mrs"
    lossless = True

    def bind(self, model, layout, latents=None) -> None:
        """Called once per decoder with the model, layout and token latents (relaxed verifiers look up
        neighbours)."""

    def targets(
        self, p: torch.Tensor, support: torch.Tensor | None, positions: torch.Tensor, draws: Draws
    ) -> torch.Tensor:
        """What :meth:`verify` tests against, from the forward's targets p [B, N, V] (``support``
        [B, N, K] or None: columns outside which p is zero; ``positions`` [B, N]: the position each
        target is for): p itself, exact rejection sampling's target."""
        return p

    def accept(self, p: torch.Tensor, q: torch.Tensor, d: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Which drafts d [...] ~ q [..., V] pass under target p [..., V] with uniforms u [...]; d
        holds table columns (:meth:`Draws.local`), as in :meth:`residual`."""
        return accepts(p.gather(-1, d[..., None]).squeeze(-1), q.gather(-1, d[..., None]).squeeze(-1), u)

    def residual(self, p: torch.Tensor, q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        """Where to draw from after draft d [...] was rejected."""
        return residual(p, q)

    def verify(
        self,
        p: torch.Tensor,
        window: Window,
        m: torch.Tensor,
        positions: torch.Tensor,
        draws: Draws,
        tree: TreeNodes | None = None,
        support: torch.Tensor | None = None,
    ):
        """p [B, size, V]: target for the depth after each block node (``support`` [B, size, K]:
        columns outside which it is zero, or None). m [B]: spine depths that
        may be accepted (inside the image and on the spine). positions [B, W+1]: position of
        depths 1..W+1. Block nodes 0..W_r are the root and the spine drafts; ``tree`` (the block's
        ``ForwardBlock.tree``, None: a chain) says which candidates' nodes follow, and where.

        Returns (k [B] accepted drafts, next token [B], path [B, W+1] block indices whose first
        k+1 entries are the root and the accepted nodes).
        """
        b, w = window.tokens.shape
        if w == 0:  # window 1 (plain AR): nothing to check, sample the next token by Gumbel-max
            zero = torch.zeros(b, 1, dtype=torch.int64, device=p.device)
            top = None if support is None else support.select(1, 0)
            return zero.view(b), draws.choose(p.select(1, 0), positions.select(1, 0), top), zero
        if tree is None:
            return self._chain(p, window, m, positions, draws)
        uni, depth = tree.universe, tree.universe.levels
        rows = _arange(b, p.device)
        at = torch.zeros(b, dtype=torch.int64, device=p.device)  # universe index + 1 (0: the root)
        node = torch.zeros_like(at)  # its block index
        path = torch.zeros(b, w + 1, dtype=torch.int64, device=p.device)
        k = torch.zeros_like(at)
        live = torch.ones(b, dtype=torch.bool, device=p.device)
        final = p[:, 0]

        for t in range(1, depth + 1):
            r = tree.ranks[t - 1]
            kids = uni.child[at][:, :r]  # [B, r]
            where = tree.index.gather(1, kids.clamp(min=0))
            present = (kids >= 0) & (where >= 0) & window.cand_valid[:, t - 1, :r] & (t <= m)[:, None]
            target, chosen = self._siblings(p[rows, node], window, t, present, positions[:, t - 1], draws)
            go = live & (chosen >= 0)
            pick = chosen.clamp(min=0)[:, None]
            final = torch.where((live & ~go)[:, None], target, final)
            at = torch.where(go, kids.gather(1, pick)[:, 0] + 1, at)
            node = torch.where(go, where.gather(1, pick)[:, 0], node)
            path[:, t] = torch.where(go, node, path[:, t])
            k, live = k + go, live & go

        on_spine = live & (node == depth)
        drafts, q = draws.local(window.tokens[:, depth:]), window.q[:, depth:]
        run = torch.where(on_spine, self._run(p[:, depth:w], q, drafts, positions[:, depth:w], m - depth, draws), 0)
        node = torch.where(on_spine, depth + run, node)
        rejected = on_spine & (depth + run < m)
        if w > depth:
            at = run.clamp(max=w - depth - 1)
            chain_target = torch.where(
                rejected[:, None], self.residual(p[rows, node], q[rows, at], drafts[rows, at]), p[rows, node]
            )
        else:
            chain_target = p[rows, node]
        final = torch.where(live[:, None], chain_target, final)
        steps = _arange(w + 1, p.device)[depth + 1 :]
        path[:, depth + 1 :] = torch.where(
            on_spine[:, None] & (steps - depth <= run[:, None]), steps, path[:, depth + 1 :]
        )
        k = k + run
        return k, draws.sample(final, positions[rows, k], Stream.SAMPLE), path

    def _run(self, p, q, drafts, positions, limit, draws: Draws, u: torch.Tensor | None = None) -> torch.Tensor:
        """Accepted run length [B] of a chain of drafts [B, W] (only the first ``limit`` count)."""
        u = draws.uniform(positions, Stream.ACCEPT) if u is None else u
        ok = self.accept(p, q, drafts, u) & (_arange(drafts.shape[1], drafts.device) < limit[:, None])
        stop = torch.cat([~ok, ok.new_ones(ok.shape[0], 1)], -1)  # the first rejection, or past the end
        return stop.to(torch.int64).argmax(-1)

    def _chain(self, p, window: Window, m, positions, draws: Draws):
        """:meth:`verify` without a tree: the block is the root and the W chain drafts. The accept
        and sample uniforms of every depth come from one draw (the same keys as apart)."""
        b, w = window.tokens.shape
        drafts = draws.local(window.tokens)
        u = draws.uniform(positions[..., None], _streams(p.device))  # [B, W + 1, 2]
        run = self._run(p[:, :w], window.q, drafts, positions[:, :w], m, draws, u[:, :w, 0])
        rows = _arange(b, p.device)
        at = run.clamp(max=w - 1)
        target = p[rows, run]
        target = torch.where((run < m)[:, None], self.residual(target, window.q[rows, at], drafts[rows, at]), target)
        path = _arange(w + 1, p.device).expand(b, -1)
        return run, categorical(target, u[rows, run, 1]) + draws.lo, path

    def _siblings(self, target, window: Window, t: int, valid, position, draws: Draws):
        """Recursive rejection over the candidates of depth t that the block holds (``valid`` [B, r],
        a prefix of the ranks). Returns the distribution to draw from if all are rejected, and the
        accepted rank (-1 if none)."""
        q = window.q[:, t - 1]
        cand = draws.local(window.cand[:, t - 1, : valid.shape[1]])
        chosen = torch.full_like(position, -1)
        # rank 0 (the spine's draft) with the chain's own key, rank r > 0 with extra key r: a tree
        # that holds no sibling verifies exactly as the chain would
        u = draws.uniform(position[:, None], Stream.ACCEPT, torch.arange(cand.shape[1], device=cand.device))
        u[:, 0] = draws.uniform(position, Stream.ACCEPT)
        for r in range(cand.shape[1]):
            c = cand[:, r]
            open_ = valid[:, r] & (chosen < 0)
            ok = self.accept(target, q, c, u[:, r]) & open_
            chosen = torch.where(ok, r, chosen)
            rej = (open_ & ~ok)[:, None]
            target = torch.where(rej, self.residual(target, q, c), target)
            if r + 1 < cand.shape[1]:
                q = torch.where(rej, without(q, c), q)
        return target, chosen


@register(
    "invariant",
    "verifier",
    "same seed, same tokens as ar: a draft passes iff it is ar's Gumbel-max choice there (drafter-invariant)",
)
class SameAsAr(Verifier):
    """The drafter-invariant verifier (Daliri, Musco and Suresh 2024; docs/DESIGN.md §10): every
    target becomes the point mass at ``argmax(log p + g)``, the token ``ar`` itself samples there
    with the same seed, and the exact walk above runs on those. Its acceptance is at least
    (1 - TV) / (1 + TV) for a Gumbel-shared draft (``scd-gs``), against 1 - TV under rejection
    sampling; a draft drawn independently of g passes about sum(p q)."""

    name = "invariant"

    def targets(self, p, support, positions, draws):
        chosen = draws.local(draws.choose(p, positions, support))
        return torch.zeros_like(p).scatter_(-1, chosen[..., None], 1.0)
