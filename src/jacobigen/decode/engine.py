"""The one decode step (docs/DESIGN.md §3): draft -> one forward -> verify -> commit.

Every method and every schedule runs this step. A *schedule* (:mod:`.chain`, :mod:`.pjd`) says
which positions enter the block, their attention structure, and which of its segments are verified
exactly (commit the accepted run plus one sampled token) or prefix-only (commit the accepted run);
the drafter, the proactive tree and the verifier are the method's parts. The batch scheduler
(:mod:`.batching`) admits, refills and compacts rows around the step.
"""

from __future__ import annotations

import time
import warnings
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Literal, NamedTuple, Protocol, cast

import torch

from ..core.cache import CacheRows
from ..core.contract import model_device, prompt_lengths, sync
from ..core.draws import Draws
from ..core.errors import WeightsError
from ..core.invariant import install, row_invariant_kernels
from ..core.masks import block_mask, prefix_structure
from ..core.recording import recording
from ..core.rng import Stream
from ..core.sampling import SamplingConfig, TargetPipeline
from ..parts.drafters import Slots
from ..parts.tree import TreeNodes
from ..parts.verifiers import Window
from .capture import Graphed, captured, forward_of
from .replay import OpReplay, Replayed, recorder_for


class CompileFallback(UserWarning):
    """The whole-step graph failed to build; the engine decodes on with the eager step."""


PER_SEQUENCE: Final = "per-sequence"
Determinism = bool | Literal["per-sequence"]
"""False: one shared forward per step, rounded as its kernels round (the distribution is exact; a
sequence's float32 draw near a boundary may differ with its batch). True: the shared forward with
row-invariant kernels (:mod:`jacobigen.core.invariant`): a sequence's tokens are bit-identical alone
and in any batch. "per-sequence": the fallback, each sequence's own forward calls."""


def model_rows(rows: torch.Tensor, group: int) -> torch.Tensor:
    """Model rows of batch rows: a guided sequence owns a (cond, uncond) pair."""
    return (rows[:, None] * group + torch.arange(group, device=rows.device)).flatten()


def per_model_row(x: torch.Tensor, group: int) -> torch.Tensor:
    """x [B, ...] repeated for each model row of its sequence: [B * group, ...]."""
    if group == 1:
        return x
    return x.unsqueeze(1).expand(-1, group, *x.shape[1:]).reshape(-1, *x.shape[1:])


@dataclass
class Flight:
    """What every schedule keeps per batch row: row r decodes sequence ``seq[r]`` (-1: free)."""

    seq: torch.Tensor  # [B]
    seeds: torch.Tensor  # [B] seed of that sequence
    iteration: torch.Tensor  # [B] iterations it has run
    base: torch.Tensor  # [B * group] prompt length of each model row
    board: torch.Tensor  # [B, length + 1] committed tokens (newest guesses elsewhere); last: scratch
    committed: torch.Tensor  # [B] committed tokens (>= length: finished or free)
    live: torch.Tensor  # [B] the last forward counted for this row (its targets may be reused)
    when: torch.Tensor  # [B, length] iteration that committed each token (0: the prefill; -1: not yet)
    lo: int = 0  # the id of the decode tables' column 0 (the layout's id span's start)

    STATE: ClassVar = ("seq", "seeds", "iteration", "base", "board", "committed", "live", "when")

    @property
    def draws(self) -> Draws:
        return Draws(self.seeds, self.iteration, self.lo)

    def select(self, rows: torch.Tensor, model_rows: torch.Tensor) -> None:
        self.seq, self.seeds, self.iteration = self.seq[rows], self.seeds[rows], self.iteration[rows]
        self.base, self.board = self.base[model_rows], self.board[rows]
        self.committed, self.live, self.when = self.committed[rows], self.live[rows], self.when[rows]


@dataclass
class Segments:
    """The drafts of one iteration as the verifier sees them: S chains per batch row, flattened
    to [B * S] rows of W depths, with the positions of depths 1..W, the block nodes of each chain,
    and the draws of each chain's sequence: ``drafting`` those of the iteration the drafts come
    from (a tree draws its siblings under them), ``draws`` those of the verification. ``plan`` is
    the schedule's own record of the iteration (None for the chain), handed on to its block and
    commit."""

    window: Window
    positions: torch.Tensor  # [B * S, W]
    size: int  # block nodes per chain
    drafting: Draws
    draws: Draws
    per_row: int = 1  # S
    plan: Any = None


@dataclass
class ForwardBlock:
    """One forward: ``tokens``/``node_pos`` [B, N] (generated position of each node's token), the
    additive mask over the cache, and per chain the depths ``m`` that lie inside its row and the
    positions ``depth_pos`` of depths 1..W+1 [B * S, W + 1]; ``tree``, the nodes of this iteration's
    trees the verifier walks (None: chains only), travels with the block, never through the window."""

    tokens: torch.Tensor
    node_pos: torch.Tensor
    mask: torch.Tensor
    m: torch.Tensor | None  # None: no drafts to verify
    depth_pos: torch.Tensor
    tree: TreeNodes | None = None


class Commit(NamedTuple):
    """What one iteration did to each batch row [B]: tokens committed, block nodes evaluated, and
    tokens committed from off-spine tree nodes."""

    tokens: torch.Tensor
    nodes: torch.Tensor
    off_spine: torch.Tensor


class Schedule(Protocol):
    """Which positions enter each block and how they are verified and committed (:mod:`.chain`,
    :mod:`.pjd`). What one iteration decides travels as returned values: ``slots`` -> ``segments``
    -> ``block`` -> ``commit``; only what the next iteration reads stays on the schedule."""

    @property
    def board_width(self) -> int: ...  # columns of the flight's board
    @property
    def slot_count(self) -> int: ...  # draft slots per row (the drafter's state)
    @property
    def block_slack(self) -> int: ...  # cache slots past the image a block may write into

    def start(self, rows: int, vocab: int, cache) -> None: ...
    def admit(self, fl: Flight, fresh: torch.Tensor, first: torch.Tensor, cache) -> None: ...
    def select(self, rows: torch.Tensor) -> None: ...
    def settled(self, fl: Flight) -> torch.Tensor: ...
    def slots(self, fl: Flight) -> Slots: ...
    def segments(
        self, fl: Flight, slots: Slots, tokens: torch.Tensor, q: torch.Tensor, drafting: Draws, draws: Draws
    ) -> Segments: ...
    def block(self, fl: Flight, seg: Segments, cache) -> ForwardBlock: ...
    def commit(self, fl: Flight, seg: Segments, block, p, support, k, nxt, path, cache) -> Commit: ...


class Engine:
    """Model access and the step, for one (model, layout, sampling, parts, schedule)."""

    def __init__(
        self,
        model,
        layout,
        sampling: SamplingConfig,
        parts,
        schedule: Schedule,
        targets: TargetPipeline,
        timing: bool = False,
        compile: bool | str = False,
        deterministic: Determinism = False,
        cuda_graphs: bool = True,
    ):
        self.model, self.layout, self.parts, self.schedule = model, layout, parts, schedule
        self.device = model_device(model)
        self.last_position = model.max_seq_len - 1
        self.group = 2 if sampling.guided else 1
        self.targets_of = targets
        self.deterministic = deterministic
        if deterministic is True and not install(model):
            warnings.warn(
                "deterministic: this machine's matrix kernel rounds some of the model's products by their row "
                "count whatever the padding or chunking, so each sequence runs its own forward calls",
                stacklevel=3,
            )
            self.deterministic = PER_SEQUENCE
        self._kernels = row_invariant_kernels if self.deterministic is True else nullcontext
        self.timed = timing and self.device.type == "cuda" and not compile  # timing syncs only when asked
        self.nfe, self.forward_time = 0, 0.0
        recorder = recorder_for(self.device, compile)
        self.compiled = bool(compile) or recorder is not None
        # the stand-in records ATen ops as they run: it takes the step as it is
        self._whole = bool(compile) and recorder is not OpReplay  # the whole step compiled: fall back if that fails
        step = captured(self._step, compile) if self._whole else self._step
        self._advance = Replayed(step, self._state, recorder) if recorder else step
        self.cuda_graphs = cuda_graphs
        self.model = forward_of(model, self.device, cuda_graphs and not self.compiled)  # a replayed step holds it

    def _fall_back(self, error: Exception) -> None:
        """The whole-step graph failed to compile or to run (on some devices inductor cannot build a
        kernel of it, or a graph fails to capture): run the eager step from now on, its forwards
        graphed on CUDA. Compile errors come before the graph runs, and a compiled graph writes its
        inputs back at its end, so the step starts again from the state it was given."""
        self.model = forward_of(self.model, self.device, self.cuda_graphs)
        warnings.warn(
            f"the compiled step failed to build ({type(error).__name__}: {str(error)[:200]}); decoding goes on "
            "with the eager step" + (" and graphed forwards" if isinstance(self.model, Graphed) else ""),
            CompileFallback,
            stacklevel=4,
        )
        self._advance, self._whole = self._step, False

    def _state(self, fl: Flight, cache) -> tuple:
        """The objects whose attributes are the step's state (what a replayed step keeps in place)."""
        return fl, cache, self.schedule, self.parts.drafter, self.parts.verifier, self.targets_of

    # --- model access -----------------------------------------------------------------------

    def forward(self, fl: Flight, block: ForwardBlock, cache) -> torch.Tensor:
        """One forward of the batch's block; a guided sequence runs as a (cond, uncond) row pair.
        Slots past the image end (slack whose outputs are discarded) get the last position the model
        takes instead of one beyond its context (the contract: jacobigen.core.contract.ImageModel)."""
        tokens, node_pos = per_model_row(block.tokens, self.group), per_model_row(block.node_pos, self.group)
        positions = (fl.base.unsqueeze(1) + node_pos).clamp(max=self.last_position)
        return self._run_model(tokens, positions, block.mask, cache, fl.base)

    def _run_model(self, tokens, positions, mask, cache, prompt_len: torch.Tensor) -> torch.Tensor:
        """One forward; ``prompt_len`` [R]: each model row's prompt length, for a model that needs it.
        Inside a recorded step the forward is not timed apart (the step is one graph)."""
        if recording():
            return self._call(tokens, positions, mask, cache, prompt_len)
        if self.timed:
            sync(self.device)
        t0 = time.perf_counter()
        logits = self._call(tokens, positions, mask, cache, prompt_len)
        if self.timed:
            sync(self.device)
        self.forward_time += time.perf_counter() - t0
        return logits

    def _sequences(self, cache, rows: int, alone: bool = False) -> list[tuple]:
        """(cache view, row slice) of each model call: the whole batch at once (a shared forward),
        or, with ``alone`` or ``deterministic="per-sequence"``, one call per sequence (its model rows)."""
        g = self.group if alone or self.deterministic == PER_SEQUENCE else rows
        if rows <= g:
            return [(cache, slice(0, rows))]
        return [(CacheRows(cache, r, r + g), slice(r, r + g)) for r in range(0, rows, g)]

    def _call(self, tokens, positions, mask, cache, prompt_len: torch.Tensor) -> torch.Tensor:
        """The model on these rows, one call per :meth:`_sequences` piece (row-invariant kernels when
        deterministic)."""
        pieces = self._sequences(cache, tokens.shape[0])
        with self._kernels():
            if len(pieces) == 1:  # the shared forward: the tensors as they are
                return self.model(tokens, positions, mask, cache, **prompt_lengths(self.model, prompt_len))
            out = [
                self.model(tokens[s], positions[s], mask[s], view, **prompt_lengths(self.model, prompt_len[s]))
                for view, s in pieces
            ]
        return torch.cat(out)

    @property
    def measured_forward_time(self) -> float | None:
        """Seconds in the model forward; None on an accelerator unless ``timing`` synced it, and in a
        compiled step (the forward is part of its graph)."""
        if self.compiled:
            return None
        return self.forward_time if self.timed or self.device.type == "cpu" else None

    def prefill(self, prefixes: list[list[int]], cache, seeds: torch.Tensor) -> torch.Tensor:
        """The prompts (model rows, right-padded) into ``cache``: one forward, or when deterministic
        one per sequence at its own width (attention rounds a query by how many share its block, so
        a prompt padded to a longer one's width could round otherwise); returns the first generated
        token of each sequence, drawn as it would be alone."""
        base = torch.tensor([len(p) for p in prefixes], device=self.device)
        pieces = self._sequences(cache, len(prefixes), alone=bool(self.deterministic))
        last = torch.cat([self._prefill(prefixes[rows], view, base[rows]) for view, rows in pieces])
        self.nfe += 1
        if bool((last.isnan() | last.isposinf()).any()):  # -inf is how adapters rule ids out; one read per admission
            raise WeightsError(
                f"the model ({getattr(self.model, 'name', type(self.model).__name__)}) returned "
                f"NaN or +inf logits for a prompt: its weights are probably corrupted"
            )
        cache.commit(None, base)
        zero = torch.zeros(seeds.shape[0], 1, dtype=torch.int64, device=self.device)
        # the first token comes from the prefill every method shares: one inverse-CDF draw, the same
        # token under every method (ar's later tokens are Gumbel-max: parts.verifiers)
        p0 = self.targets_of(last, zero)[:, 0]
        return Draws(seeds, torch.zeros_like(seeds), self.targets_of.span[0]).sample(p0, zero[:, 0], Stream.SAMPLE)

    def _prefill(self, prefixes: list[list[int]], cache, base: torch.Tensor) -> torch.Tensor:
        """One forward of these prompts; the logits after each one's last token [rows, 1, vocab]."""
        width = max(len(p) for p in prefixes)
        rows = torch.zeros(len(prefixes), width, dtype=torch.int64)
        for r, pre in enumerate(prefixes):
            rows[r, : len(pre)] = torch.tensor(pre)
        rows = rows.to(self.device)
        positions = torch.arange(width, device=self.device).expand_as(rows)
        mask = block_mask(cache.lengths, cache.capacity, prefix_structure(base, width))
        logits = self._run_model(rows, positions, mask, cache, base)
        return logits[torch.arange(len(prefixes), device=self.device), base - 1][:, None]

    @property
    def forward_path(self) -> str:
        """How the forwards ran, for the stats: in a compiled or replayed step, ``graphed``, ``eager``, or
        eager because the graphs failed (:attr:`Graphed.status`)."""
        if self._whole:
            return "compiled step"
        if isinstance(self._advance, Replayed):
            return "replayed step"
        return self.model.status if isinstance(self.model, Graphed) else "eager"

    @property
    def capture_time(self) -> float:
        """Seconds this engine spent on warm steps and graph recordings (0 unless its step is replayed)."""
        return getattr(self._advance, "capture_time", 0.0)

    # --- the step ---------------------------------------------------------------------------

    def step(self, fl: Flight, cache, running: torch.Tensor) -> Commit:
        """Draft, forward once, verify, commit. ``running`` [B]: rows not finished."""
        self.nfe += 1
        if self._whole:
            try:
                return cast(Commit, self._advance(fl, cache, running))
            except Exception as e:  # whatever the compiler or the device raised: the eager step decodes on
                self._fall_back(e)
        return cast(Commit, self._advance(fl, cache, running))

    def _step(self, fl: Flight, cache, running: torch.Tensor) -> Commit:
        sched, parts = self.schedule, self.parts
        slots = sched.slots(fl)
        drafting = fl.draws  # drafts come from the last forward, under its iteration
        if slots.positions.shape[1]:
            tokens, q = parts.drafter.draft(slots, drafting)
        else:
            tokens, q = slots.old_tokens, slots.old_q
        fl.iteration = fl.iteration + running
        seg = sched.segments(fl, slots, tokens, q, drafting, fl.draws)
        block = sched.block(fl, seg, cache)
        p, support = self.targets_of.with_support(self.forward(fl, block, cache), block.node_pos + 1)
        judged = parts.verifier.targets(p, support, block.node_pos + 1, fl.draws)
        k, nxt, path = parts.verifier.verify(
            judged.view(-1, seg.size, p.shape[-1]),
            seg.window,
            block.m,
            block.depth_pos,
            seg.draws,
            block.tree,
            None if support is None else support.view(-1, seg.size, support.shape[-1]),
        )
        return sched.commit(fl, seg, block, p, support, k, nxt, path, cache)
