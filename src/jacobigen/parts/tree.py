"""SJD-PAC's proactive tree, carved out of the window (docs/DESIGN.md §4.2).

One forward evaluates a block: the last committed token (the root), the chain of drafts hanging
from it (the *spine*), then the tree's extra nodes. Tree depth counts the root, as the authors'
code does: a tree of depth D and width K spans drafted depths 1..D-1, and at each of them K
candidates are drawn without replacement, rank 0 being the spine's own draft. Every node at depth t
may have children carrying the candidates of depth t+1 in rank order; the *universe* is the full
K-ary tree ((K^D - 1)/(K - 1) nodes with the root, 21 for the paper's K = 4, D = 3), its
all-rank-0 path is the spine.

A tree is a subset of the universe that holds the spine and is closed under parents and
lower-ranked siblings (recursive rejection tests siblings in rank order). Which subset is chosen
here, before the forward, from the drafts' q alone; it never looks at the target p, which is what
keeps the sibling rule exact:

- ``full``: the whole universe (the reference tree);
- a number N: at most N off-spine nodes, best first by their value, the probability under the draft
  distributions that the node is reached and accepted (the product of q along its path: EAGLE-2's
  value), where a node counts only as much as the least of its parent and lower-ranked siblings;
- ``auto``: per sequence and iteration, a tree is built when its nodes' values, calibrated by the
  sequence's own acceptance record, beat the chance that the chain accepts the depths they displace
  in this iteration or the next by enough to pay for its bookkeeping; it holds the nodes that also
  beat what one draft less costs the chain in later iterations (:class:`AutoBudget`).

Extras take the block's last positions, so the block is always ``window`` tokens (the reference
carves the tree from its L-token block the same way); a layout without a window (PJD's segments)
puts them after its drafts.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..core.draws import Draws
from ..core.errors import ConfigError
from ..core.recording import recording
from ..core.registry import register
from ..core.rng import Stream

MAX_NODES = 4096  # universe nodes: built as Python lists once per (depth, width), then as tensors


@register(
    "pac", "tree", "SJD-PAC's proactive tree: siblings drawn without replacement at the first depths", prefix="tree_"
)
@dataclass(frozen=True)
class ProactiveTree:
    """SJD-PAC proactive drafting: at each tree depth, K candidates without replacement.

    Rank 0 is the drafter's own draft (marginally ~ q, whatever coupling produced it); ranks 1..K-1
    continue sampling without replacement from q with the earlier ranks removed (Gumbel top-k),
    which is the joint law the sibling verifier's renormalisation assumes.
    """

    depth: int = 3  # levels counting the root
    width: int = 4  # candidates per drafted depth
    budget: int | str = "auto"  # off-spine nodes: a number, "full" or "auto"
    min_gain: float | None = None  # auto: the share of a chain's tokens a tree must add (None: gain_bar)
    tail_worth: float = 12.0  # auto: k in the chain's tokens per iteration T(W) = T_max - k / W

    def __post_init__(self):
        for name in ("depth", "width"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"tree_{name} must be an integer >= 1, got {v!r}")
        nodes = sum(self.width**t for t in range(min(self.depth, 64)))  # the universe, root included
        if nodes > MAX_NODES:
            raise ConfigError(
                f"tree_depth={self.depth} and tree_width={self.width} span more than {MAX_NODES} "
                f"tree nodes, the most allowed (the reference tree, depth 3 and width 4, has 21)"
            )
        b = self.budget
        if not (b in ("auto", "full") or (isinstance(b, int) and not isinstance(b, bool) and b >= 0)):
            raise ConfigError(f"tree_budget must be an integer >= 0, 'full' or 'auto', got {b!r}")
        g = self.min_gain
        if g is not None and (isinstance(g, bool) or not isinstance(g, (int, float)) or not g >= 0):  # inf: no tree
            raise ConfigError(f"tree_min_gain must be a number >= 0, got {g!r}")
        k = self.tail_worth
        if isinstance(k, bool) or not isinstance(k, (int, float)) or not 0 <= k < float("inf"):
            raise ConfigError(f"tree_tail_worth must be a finite number >= 0, got {k!r}")

    def gain_bar(self, window: int) -> float:
        """The share of the chain's tokens an automatic tree must add: ``min_gain``, by default
        6 / (24 + window). A tree's bookkeeping costs about as much as 8 block tokens' share of an
        iteration on a CPU (20% at window 16, 14% at 32, 9% at 64 with the embedded model), and a
        committed sibling is worth about 1.4 tokens (the next window starts past it)."""
        return 6 / (24 + window) if self.min_gain is None else self.min_gain

    @property
    def levels(self) -> int:
        """Drafted depths that carry siblings."""
        return self.depth - 1 if self.width > 1 else 0

    def off_spine(self, levels: int | None = None) -> int:
        """Off-spine nodes of the universe over ``levels`` depths (default all)."""
        d = self.levels if levels is None else levels
        return sum(self.width**t for t in range(1, d + 1)) - d

    def cap(self, levels: int) -> int:
        """Most off-spine nodes a block may hold."""
        full = self.off_spine(levels)
        return min(self.budget, full) if isinstance(self.budget, int) else full

    def carve(self, window: int) -> tuple[int, int]:
        """(levels, most off-spine nodes) of the tree carved out of a ``window``-token block: the
        spine keeps at least the tree's depths; (0, 0) when no sibling fits, and for the automatic
        budget when the reference tree does not fit."""
        w = window - 1
        levels = min(self.levels, w)
        cap = min(self.cap(levels), w - levels) if levels else 0
        if self.budget == "auto" and levels and self.off_spine(levels) > cap:
            return 0, 0  # a window smaller than the reference tree: the plain chain (see AutoBudget)
        if self.budget == "full" and levels and self.off_spine(levels) > cap:
            need = 1 + levels + self.off_spine(levels)
            raise ConfigError(
                f"the full tree of depth {self.depth} and width {self.width} has {need} nodes and "
                f"does not fit a window of {window}: use a window of at least {need} or a tree_budget"
            )
        return (levels, cap) if cap else (0, 0)

    def added(self, drafts: int) -> tuple[int, int]:
        """(levels, most off-spine nodes) of the tree a layout adds after ``drafts`` drafts (PJD's
        rows); (0, 0) when no sibling can be added."""
        levels = min(self.levels, drafts)
        cap = self.cap(levels) if levels else 0
        return (levels, cap) if cap else (0, 0)

    def expand(
        self, first: torch.Tensor, q: torch.Tensor, positions: torch.Tensor, draws: Draws
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """first [B, D] rank-0 drafts, q [B, D, V]. Returns candidates (model ids) and validity [B, D, K]."""
        keys = q.clamp(min=0).log() + draws.gumbel(positions, q.shape[-1], Stream.TREE)
        keys = keys.scatter(-1, draws.local(first)[..., None], float("-inf"))
        rest = keys.topk(min(self.width - 1, q.shape[-1]), dim=-1)
        pad = self.width - 1 - rest.indices.shape[-1]
        cand = torch.cat([first[..., None], rest.indices + draws.lo, first[..., None].expand(*first.shape, pad)], -1)
        valid = torch.cat(
            [
                torch.ones_like(first[..., None], dtype=torch.bool),
                rest.values > float("-inf"),
                torch.zeros(*first.shape, pad, dtype=torch.bool, device=first.device),
            ],
            -1,
        )
        return cand, valid


class Universe:
    """The full K-ary tree over ``levels`` drafted depths, in breadth-first order (each node's
    children are its K candidates of the next depth, rank order). Static per (levels, width)."""

    def __init__(self, levels: int, width: int, device):
        self.levels, self.width = levels, width
        self.starts = [sum(width**i for i in range(1, t)) for t in range(1, levels + 2)]
        size = self.starts[-1]
        level = [t for t in range(1, levels + 1) for _ in range(width**t)]
        rank = [a % width for t in range(1, levels + 1) for a in range(width**t)]
        parent = [-1] * width + [self.starts[t - 2] + a // width for t in range(2, levels + 1) for a in range(width**t)]
        spine = [a == 0 for t in range(1, levels + 1) for a in range(width**t)]
        # child[u + 1, r]: universe index of node u's rank-r child (row 0: the root), -1 past the last level
        child = [[r for r in range(width)]] + [
            [self.starts[t] + (u - self.starts[t - 1]) * width + r if t < levels else -1 for r in range(width)]
            for u, t in zip(range(size), level, strict=True)
        ]
        self.level = torch.tensor(level, dtype=torch.int64, device=device)
        self.rank = torch.tensor(rank, dtype=torch.int64, device=device)
        self.parent = torch.tensor(parent, dtype=torch.int64, device=device)
        self.spine = torch.tensor(spine, device=device)
        self.child = torch.tensor(child, dtype=torch.int64, device=device).view(size + 1, width)
        self.flat = (self.level - 1) * width + self.rank  # each node's candidate in [levels * K]
        self.size = size

    def values(self, cand_q: torch.Tensor) -> torch.Tensor:
        """[R, U]: product of the candidates' q along each node's path (cand_q [R, levels, K])."""
        out, prev = [], None
        for t in range(self.levels):
            v = cand_q[:, t].repeat(1, self.width**t)
            prev = v if prev is None else prev.repeat_interleave(self.width, 1) * v
            out.append(prev)
        return torch.cat(out, 1)

    def scores(self, values: torch.Tensor, ok: torch.Tensor) -> torch.Tensor:
        """[R, U]: a node is worth the least of its own value and its parent's and lower-ranked
        siblings' worth (those come first); the spine is always in (+inf), ``ok`` False: -inf."""
        s = torch.where(ok, values, float("-inf"))
        s = torch.where(self.spine, float("inf"), s)
        out, prev = [], None
        for t in range(self.levels):
            level = s[:, self.starts[t] : self.starts[t + 1]]
            level = level.view(level.shape[0], -1, self.width).cummin(-1).values.flatten(1)
            prev = level if prev is None else torch.minimum(level, prev.repeat_interleave(self.width, 1))
            out.append(prev)
        return torch.cat(out, 1)


@functools.lru_cache(maxsize=16)
def universe(levels: int, width: int, device: torch.device) -> Universe:
    return Universe(levels, width, device)


@dataclass
class TreeNodes:
    """Where the tree of one iteration sits in each chain's block: ``index`` [R, U] block index of
    every universe node (-1: not in this tree); ``spine`` [R] drafts on the spine (W_r); ``ranks``
    per drafted depth, how many candidate ranks any chain's tree holds (the verifier tests no more)."""

    universe: Universe
    index: torch.Tensor
    spine: torch.Tensor
    ranks: list[int]


@dataclass
class TreeBlock:
    """The block of R chains with their trees: tokens, node depths, which node sees which, which
    nodes are real (not padding), and the tree as the verifier walks it."""

    tokens: torch.Tensor  # [R, T]
    depth: torch.Tensor  # [R, T]
    structure: torch.Tensor  # [R, T, T] node i attends to node j iff j is i or an ancestor
    real: torch.Tensor  # [R, T]
    nodes: TreeNodes


@dataclass
class Ranking:
    """The universe's off-spine nodes of R chains, best first (ties: breadth-first order, parents
    first), with every node's value."""

    values: torch.Tensor  # [R, U] product of q along each node's path
    best: torch.Tensor  # [R, U] scores, sorted (-inf: the spine, or a node that may not go in)
    order: torch.Tensor  # [R, U] universe index of each sorted score

    def available(self, cap: int) -> torch.Tensor:
        """Nodes [R] that may go in, at most ``cap``."""
        return (self.best > float("-inf")).sum(1).clamp(max=cap)


def rank_candidates(
    tree: ProactiveTree, uni: Universe, win, positions: torch.Tensor, drafting: Draws, limit: torch.Tensor
) -> Ranking:
    """Draw the siblings of the tree's depths into ``win`` (its ``cand``, ``cand_valid``) and rank
    the universe's off-spine nodes; a node deeper than ``limit`` [R] may not go in."""
    d = uni.levels
    win.cand, win.cand_valid = tree.expand(win.tokens[:, :d], win.q[:, :d], positions[:, :d], drafting)
    values = uni.values(win.q[:, :d].gather(-1, drafting.local(win.cand)))
    ok = win.cand_valid.flatten(1)[:, uni.flat] & (uni.level <= limit[:, None])
    extra = torch.where(uni.spine, float("-inf"), uni.scores(values, ok))
    best, order = extra.sort(dim=1, descending=True, stable=True)
    return Ranking(values, best, order)


def select(uni: Universe, ranking: Ranking, count: torch.Tensor, spine: torch.Tensor) -> TreeNodes:
    """The ``count`` [R] best off-spine nodes after ``spine`` [R] drafts: block index spine + 1 +
    slot, in breadth-first order (parents first). Reads the ranks in use (one host read), except in
    a recorded step, which keeps every rank and lets the verifier skip the absent ones."""
    first = (torch.arange(uni.size, device=count.device) < count[:, None]) & (ranking.best > float("-inf"))
    chosen = torch.zeros_like(first).scatter_(1, ranking.order, first)
    index = torch.where(chosen, spine[:, None] + chosen.long().cumsum(1), -1)
    index = torch.where(uni.spine, uni.level, index)
    if recording():
        return TreeNodes(uni, index, spine, [uni.width] * uni.levels)
    used = ((index >= 0) * (uni.rank + 1)).amax(0)
    ranks = torch.stack([used[a:b].max() for a, b in itertools.pairwise(uni.starts)]).tolist()
    return TreeNodes(uni, index, spine, ranks)


def arrange(nodes: TreeNodes, root: torch.Tensor, drafts: torch.Tensor, cand: torch.Tensor, size: int) -> TreeBlock:
    """Lay out R chains of ``size`` nodes: root [R], the spine's drafts (the first ``nodes.spine``
    of ``drafts`` [R, W]), then the chosen nodes with their candidates ``cand`` [R, levels, K];
    what is left is padding that sees only the root."""
    uni, index, spine = nodes.universe, nodes.index, nodes.spine
    r, dev = root.shape[0], root.device
    chosen = (index >= 0) & ~uni.spine
    cols = torch.arange(size, device=dev)
    at = torch.where(chosen, index, size)  # column of each chosen node
    tokens = torch.zeros(r, size + 1, dtype=torch.int64, device=dev)
    tokens[:, : drafts.shape[1] + 1] = torch.cat([root[:, None], drafts], 1)
    tokens.scatter_(1, at, cand.flatten(1)[:, uni.flat])
    depth = torch.cat([cols.expand(r, -1), cols[:1].expand(r, 1)], 1).scatter(1, at, uni.level.expand(r, -1))
    tail = cols > spine[:, None]  # extras and padding
    up = torch.where(uni.parent >= 0, index.gather(1, uni.parent.clamp(min=0).expand(r, -1)), 0)
    parent = torch.where(tail, 0, (cols - 1).clamp(min=0))
    parent = torch.cat([parent, cols[:1].expand(r, 1)], 1).scatter(1, at, up)[:, :size]
    real = cols < (spine + 1 + chosen.sum(1))[:, None]

    eye = torch.eye(size, dtype=torch.bool, device=dev)
    structure = torch.ones(size, size, dtype=torch.bool, device=dev).tril().expand(r, -1, -1)
    for _ in range(uni.levels):  # one level of extras settles per pass
        above = structure.gather(1, parent[..., None].expand(-1, -1, size)) | eye
        structure = torch.where(tail[..., None], above, structure)
    return TreeBlock(tokens[:, :size], torch.where(real, depth[:, :size], 0), structure, real, nodes)


def two_iteration_reach(reach: torch.Tensor) -> torch.Tensor:
    """The chance [R, W] that the spine's draft at depth j is accepted in this iteration or the
    next, from the chance ``reach`` [R, W] that this iteration accepts depths 1..j. A draft the
    chain does not reach stays in the window and is verified again one iteration later, nearer the
    front: with L1 accepted now (and one token drawn), depth j comes back as depth j - L1 - 1.
    Measured on the embedded model, the spine's last depths are worth far more than this
    iteration's reach: window 24 takes 95.9 forwards per image against window 32's 89.6 (48
    images, scd-mc), although the chain almost never accepts 25 drafts in one iteration."""
    w = reach.shape[1]
    r = torch.cat([torch.ones_like(reach[:, :1]), reach, torch.zeros_like(reach[:, :1])], 1)  # r[:, a] = P(L >= a)
    pmf = r[:, :w] - r[:, 1 : w + 1]  # P(L1 = a), a = 0..W-1
    j = torch.arange(1, w + 1, device=reach.device)[:, None]
    back = j - torch.arange(w, device=reach.device) - 1  # depth j's place next iteration, per L1 = a
    later = torch.where(back >= 1, r[:, back.clamp(min=0)], 0.0)  # [R, W(j), W(a)]
    return reach + (later * pmf[:, None, :]).sum(-1)


class Reach(NamedTuple):
    """One iteration's view of :class:`AutoBudget` (computed before the forward, read by its tests of
    the drafts; returned, never kept): the chain's reach [R, W] (the chance it accepts depths 1..j,
    column j - 1), what a spine depth is worth over two iterations [R, W], the value calibration [R],
    the bar a tree's gain must pass [R] and the floor of a displaced depth's worth."""

    reach: torch.Tensor
    worth: torch.Tensor
    calibration: torch.Tensor
    bar: torch.Tensor
    floor: float


class AutoBudget:
    """``tree_budget=auto``, in windows that hold the reference tree (smaller ones decode as the
    chain: there every node displaces a spine depth the chain still reaches, and on the embedded
    model no bar made such trees pay: 2.27-2.47x step compression against the chain's 2.59x at
    window 16 over 48 images). Per sequence, the chance that the chain accepts depth j once it reached
    j - 1 (counted with a uniform prior), and how the tree's values compare with the off-spine
    tokens it committed. A node's margin is its calibrated value less the chance the chain accepts
    the depth it displaces (the spine's deepest left) in this iteration or the next; both are known
    before the forward. A tree is used only when its positive margins add ``min_gain`` of the tokens
    the chain alone would commit (its bookkeeping costs about a fifth of an iteration at window 16
    on a CPU with the embedded model; where forwards are dearer, a lower bar pays). It then holds
    the nodes whose margin stays positive against ``tail_worth`` / W^2 too: the chain's tokens per
    iteration grow with its window W as T_max - k / W (k = 11.8 from window 16 to 32 and 12.2 from
    32 to 64 with ``scd-mc`` on the embedded model), and a draft taken from the spine for good
    costs T'(W) = k / W^2 in every later iteration, which two iterations' reach does not see (a
    draft left unreached comes back sharper)."""

    STATE = ("accepted", "hits", "predicted", "trials")  # what the next iteration reads; the rest is returned

    def __init__(self, min_gain: float, tail_worth: float):
        self.min_gain, self.tail_worth = min_gain, tail_worth

    def start(self, rows: int, drafts: int, device) -> None:
        self.hits = torch.zeros(rows, drafts, device=device)
        self.trials = torch.zeros(rows, drafts, device=device)
        self.predicted = torch.zeros(rows, device=device)
        self.accepted = torch.zeros(rows, device=device)

    def reset(self, rows: torch.Tensor) -> None:
        for x in (self.hits, self.trials, self.predicted, self.accepted):
            x[rows] = 0

    def select(self, rows: torch.Tensor) -> None:
        self.hits, self.trials = self.hits[rows], self.trials[rows]
        self.predicted, self.accepted = self.predicted[rows], self.accepted[rows]

    def prepare(self, limit: torch.Tensor) -> Reach:
        """This iteration's :class:`Reach`: the chain reach (0 past ``limit``, the depths inside the
        image), what a spine depth is worth over two iterations (:func:`two_iteration_reach`), the
        value calibration and the bar."""
        w = self.hits.shape[1]
        pooled = (self.hits.sum(1, keepdim=True) + 1) / (self.trials.sum(1, keepdim=True) + 2)
        reach = ((self.hits + pooled) / (self.trials + 1)).cumprod(1)  # a depth seldom tried leans on the pool
        inside = torch.arange(1, w + 1, device=reach.device) <= limit[:, None]
        inner = torch.where(inside, reach, 0.0)
        return Reach(
            inner,
            torch.where(inside, two_iteration_reach(reach), 0.0),
            (self.accepted + 1) / (self.predicted + 1),
            self.min_gain * (1 + inner.sum(1)),
            self.tail_worth / w**2,
        )

    @staticmethod
    def _margins(view: Reach, values: torch.Tensor, floor: float = 0.0) -> torch.Tensor:
        """Calibrated value of the i-th best extra [R, cap] minus the worth (at least ``floor``) of
        the spine depth it displaces (the i-th extra takes depth W + 1 - i)."""
        w, cap = view.worth.shape[1], values.shape[1]
        displaced = view.worth[:, w - torch.arange(1, cap + 1, device=values.device)]
        return view.calibration[:, None] * values - displaced.clamp(min=floor)

    def worth_trying(self, view: Reach, spine_q: torch.Tensor, runner_up: torch.Tensor, cap: int, width: int) -> bool:
        """Whether any row's tree could pass :meth:`count`'s bar, from the drafts alone (one host
        read). A node at depth t is worth at most the spine's q up to t - 1 (``along``) times the
        largest q at t of an id other than the spine's draft (``runner_up``, [R, levels]); the
        siblings of depth t are worth at most ``along`` times min((K - 1) runner_up, 1 - the
        draft's q) together, and each deeper level of their subtrees no more than that again.
        When even these bounds fail, the iteration is a plain chain and no candidate is drawn."""
        levels = spine_q.shape[1]
        along = torch.cat([torch.ones_like(spine_q[:, :1]), spine_q[:, :-1].cumprod(1)], 1)
        bound = (along * runner_up).amax(1, keepdim=True).expand(-1, cap)
        gain = self._margins(view, bound).clamp(min=0).sum(1)
        siblings = along * torch.minimum((width - 1) * runner_up, 1 - spine_q)
        subtrees = (siblings * torch.arange(levels, 0, -1, device=spine_q.device)).sum(1)
        gain = torch.minimum(gain, view.calibration * subtrees)
        return bool((gain >= view.bar).any())

    def count(self, view: Reach, best: torch.Tensor, cap: int) -> torch.Tensor:
        """Extras [R] from off-spine scores sorted best first [R, >= cap]: none unless they add
        ``min_gain`` of the tokens the chain alone is expected to commit, else those worth more
        than the later iterations' cost of a shorter spine too."""
        gain = self._margins(view, best[:, :cap]).clamp(min=0).sum(1)
        take = (self._margins(view, best[:, :cap], view.floor) > 0).sum(1)
        return torch.where(gain >= view.bar, take, 0)

    def update(
        self,
        spine_run: torch.Tensor,
        off_spine: torch.Tensor,
        limit: torch.Tensor,
        value: torch.Tensor,
        active: torch.Tensor,
    ) -> None:
        j = torch.arange(1, self.hits.shape[1] + 1, device=spine_run.device)
        tried = (spine_run[:, None] >= j - 1) & (j <= limit[:, None]) & active[:, None]
        self.trials += tried
        self.hits += tried & (spine_run[:, None] >= j)
        self.predicted += value * active
        self.accepted += off_spine * active
