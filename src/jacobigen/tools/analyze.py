"""The seed papers' diagnostic measurements, on any model a pipeline wraps.

Each explains a speedup with something a user can repeat on their own model before choosing a
method and window:

- SCD's coupling-strength sweep: forward passes and the Hamming distance between the drafts of
  consecutive iterations as ``alpha`` goes from independent drafts (0) to full coupling (1), and
  the 1/2/3-iteration Hamming distance of maximal coupling against Gumbel sharing;
- SCD's guidance sweep: acceleration falls as the CFG scale grows (the target moves more);
- SJD-PAC's locality of image tokens: how far a changed token still moves the target (total
  variation at raster distance j), and its accepted-length histogram;
- PJD's row dependency: how much a token of row r moves the target in row r + 1, by column offset,
  which is what licenses starting a row once the row above has c tokens.

Every measurement returns plain data (lists and dicts); :func:`run_all` writes each as JSON beside
its figure.
"""

from __future__ import annotations

import json
import statistics
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..core.contract import model_device
from ..core.sampling import SamplingConfig, target_probs
from ..core.stats import step_compression
from ..decode.api import generate, make_decoder, prompt_rows
from ..decode.methods import get_method
from ..models.bundle import encode_one
from ..parts.drafters import Drafter, Slots
from . import extras
from .threads import environment, loadavg


class DraftTrail(Drafter):
    """Wraps a drafter and counts, for s = 1..steps, how many drafts differ between iterations s
    apart at the positions both windows hold (SCD's Hamming distance between draft windows)."""

    def __init__(self, base: Drafter, length: int, steps: int = 3):
        self.base, self.length, self.steps = base, length, steps
        self.changed = [0] * steps
        self.compared = [0] * steps

    def start(self, batch, slots, vocab, device):
        self.base.start(batch, slots, vocab, device)
        self.boards: deque[torch.Tensor] = deque(maxlen=self.steps)

    def reset(self, rows):
        self.base.reset(rows)
        for board in self.boards:
            board[rows] = -1

    def select(self, rows):
        self.base.select(rows)
        self.boards = deque((b[rows] for b in self.boards), maxlen=self.steps)

    def draft(self, slots: Slots, draws):
        tokens, q = self.base.draft(slots, draws)
        board = torch.full((tokens.shape[0], self.length + 1), -1, dtype=torch.int64, device=tokens.device)
        board.scatter_(1, slots.positions.clamp(max=self.length), tokens)
        board[:, -1] = -1  # past the image: not compared
        for s, past in enumerate(reversed(self.boards)):
            both = (board >= 0) & (past >= 0)
            self.changed[s] += int((both & (board != past)).sum())
            self.compared[s] += int(both.sum())
        self.boards.append(board)
        return tokens, q

    @property
    def hamming(self) -> list[float | None]:
        """Share of drafts that changed, s = 1..steps iterations apart."""
        return [c / n if n else None for c, n in zip(self.changed, self.compared, strict=True)]


def _sampling(options: dict) -> SamplingConfig:
    return SamplingConfig(**{k: v for k, v in options.items() if k in ("cfg", "temperature", "top_k", "top_p")})


def _decode(
    pipe, prompts: list[str], seeds: list[int], method: str, window: int, sampling: dict, trail: bool = False, **options
):
    """Decode every (prompt, seed) with ``method``; returns (forward passes per image, stats, the
    draft trail or None)."""
    sampling = {**pipe.defaults, **sampling}
    parts = get_method(method).build(window, **options)
    observed = DraftTrail(parts.drafter, pipe.layout.length) if trail else None
    if observed:
        parts = replace(parts, drafter=observed)
    config = _sampling(sampling)
    nfe, runs = [], []
    for prompt in prompts:
        model, tokens, uncond = encode_one(pipe, prompt)
        rows, row_seeds = prompt_rows(tokens, list(seeds), uncond, config.guided)
        _, stats = make_decoder(model, pipe.layout, config, parts).run(rows, row_seeds)
        nfe += stats.sequence_nfe
        runs.append(stats)
    return nfe, runs, observed


def alpha_sweep(
    pipe,
    prompts,
    seeds,
    window: int,
    alphas=(0.0, 0.25, 0.5, 0.75, 1.0),
    methods=("scd-mc", "scd-gs"),
    tick: Callable[[], None] = lambda: None,
) -> list[dict]:
    out = []
    for method in methods:
        for alpha in alphas:
            nfe, _, trail = _decode(pipe, prompts, seeds, method, window, {}, trail=True, alpha=alpha)
            out.append({"method": method, "alpha": alpha, "nfe": statistics.mean(nfe), "hamming": trail.hamming})
            tick()
    return out


def cfg_sweep(
    pipe,
    prompts,
    seeds,
    window: int,
    scales=(1.0, 2.0, 3.0, 5.0, 7.5),
    methods=("sjd", "scd-mc", "scd-gs"),
    tick: Callable[[], None] = lambda: None,
) -> list[dict]:
    out = []
    for method in methods:
        for cfg in scales:
            nfe, _, _ = _decode(pipe, prompts, seeds, method, window, {"cfg": cfg})
            out.append(
                {
                    "method": method,
                    "cfg": cfg,
                    "nfe": statistics.mean(nfe),
                    "step_compression": step_compression(pipe.layout.length, statistics.mean(nfe)),
                }
            )
            tick()
    return out


def accepted_lengths(
    pipe,
    prompts,
    seeds,
    window: int,
    methods=("sjd", "scd-mc", "scd-gs", "sjd-pac"),
    tick: Callable[[], None] = lambda: None,
) -> dict[str, dict]:
    """Per method: iterations by the tokens they committed, and the share that committed one."""
    out = {}
    for method in methods:
        _, runs, _ = _decode(pipe, prompts, seeds, method, window, {})
        counts: dict[int, int] = {}
        for stats in runs:
            for k, v in stats.histogram().items():
                counts[k] = counts.get(k, 0) + v
        out[method] = {
            "histogram": dict(sorted(counts.items())),
            "single_token_share": counts.get(1, 0) / max(sum(counts.values()), 1),
        }
        tick()
    return out


def influence(
    pipe, prompts, seeds, perturbations: int = 16, window: int = 32, tick: Callable[[], None] = lambda: None
) -> dict:
    """Total variation of the target at every later image token after one image token of a
    sampled image is replaced by another id, by raster distance (image tokens between them) and,
    for targets in the next grid row, by column offset of the changed token (right of the
    target: positive). Images are sampled with ``scd-mc`` (lossless: the model's own distribution)."""
    layout, model = pipe.layout, pipe.model
    sampling = _sampling(pipe.defaults)
    device = model_device(model)
    allowed = layout.allowed(model.vocab_size, device)
    free = (layout.forced(device) < 0).nonzero().flatten()  # image cells, raster order
    cols, lo, hi = layout.cols, *layout.image_ids
    g = torch.Generator().manual_seed(0)
    by_distance = torch.zeros(free.numel())
    by_offset = torch.zeros(2 * cols - 1)
    n_distance = torch.zeros(free.numel())
    n_offset = torch.zeros(2 * cols - 1)
    for prompt in prompts:
        model, tokens, uncond = encode_one(pipe, prompt)
        gen = generate(
            model,
            tokens,
            layout=layout,
            uncond=uncond,
            method="scd-mc",
            window=window,
            seed=list(seeds),
            **pipe.defaults,
        )
        for image in gen.tokens:
            cells = torch.randperm(free.numel() - 1, generator=g)[:perturbations]  # never the last cell
            ids = torch.randint(lo, hi - 1, (cells.numel(),), generator=g)
            changed = image.repeat(cells.numel() + 1, 1)
            old = changed[1 + torch.arange(cells.numel()), free[cells]]
            changed[1 + torch.arange(cells.numel()), free[cells]] = ids + (ids >= old)  # another id
            p = _targets(model, device, tokens, uncond, list(layout.header), changed, sampling, allowed)[:, free]
            tv = 0.5 * (p[1:] - p[:1]).abs().sum(-1)  # [P, cells]
            for t, a in zip(tv, cells.tolist(), strict=True):
                later = torch.arange(a + 1, free.numel())
                by_distance[later - a] += t[later]
                n_distance[later - a] += 1
                row, col = divmod(a, cols)
                below = torch.arange((row + 1) * cols, min((row + 2) * cols, free.numel()))
                offset = col - (below - (row + 1) * cols) + cols - 1
                by_offset[offset] += t[below]
                n_offset[offset] += 1
            tick()
    distance = (by_distance / n_distance.clamp(min=1))[1:]
    return {
        "distance": list(range(1, free.numel())),
        "tv_by_distance": distance.tolist(),
        "column_offset": list(range(-(cols - 1), cols)),
        "tv_by_column_offset": (by_offset / n_offset.clamp(min=1)).tolist(),
    }


@torch.inference_mode()
def _targets(
    model, device, prompt, uncond, header, images: torch.Tensor, sampling: SamplingConfig, allowed
) -> torch.Tensor:
    """Teacher-forced targets [N, length, V] of each image after ``prompt`` (and ``uncond`` when
    guided): the target of image position i is the output at the token before it."""

    def logits(prefix):
        pre = torch.tensor(list(prefix) + header, dtype=torch.int64).expand(images.shape[0], -1)
        out = model(torch.cat([pre, images], 1).to(device))
        return out[:, pre.shape[1] - 1 : pre.shape[1] - 1 + images.shape[1]]

    if not sampling.guided:
        return target_probs(logits(prompt), sampling, allowed)
    return target_probs(torch.stack([logits(prompt), logits(uncond)], 1).flatten(0, 1), sampling, allowed)


def run_all(
    pipe,
    prompts: list[str],
    seeds: list[int],
    window: int,
    out: Path,
    progress: bool = True,
    model_spec: str | None = None,
) -> dict:
    """Every measurement, its JSON and its figure under ``out``; each JSON also records the machine,
    code and weights (:func:`~jacobigen.tools.threads.environment`, given the ``--model`` spec ``model_spec``)."""
    plots = extras.plots()
    out.mkdir(parents=True, exist_ok=True)
    machine = environment(pipe.model, model_spec)
    alphas, scales = (0.0, 0.25, 0.5, 0.75, 1.0), (1.0, 2.0, 3.0, 5.0, 7.5)
    images = len(prompts) * len(seeds)
    total = 2 * len(alphas) + 3 * len(scales) + 4 + images
    with tqdm(total=total, desc="analyze", unit="run", disable=not progress) as bar:
        results = {
            "alpha": alpha_sweep(pipe, prompts, seeds, window, alphas, tick=bar.update),
            "cfg": cfg_sweep(pipe, prompts, seeds, window, scales, tick=bar.update),
            "accepted": accepted_lengths(pipe, prompts, seeds, window, tick=bar.update),
            "influence": influence(pipe, prompts, seeds, window=window, tick=bar.update),
        }
    machine["loadavg_after"] = loadavg()
    settings = {"model": pipe.name, "prompts": prompts, "seeds": seeds, "window": window, **pipe.defaults}
    for name, data in results.items():
        (out / f"{name}.json").write_text(
            json.dumps({"settings": settings, "environment": machine, "data": data}, indent=1)
        )
    plots.plot_analysis(results, pipe.name, out)
    return results
