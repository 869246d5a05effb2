"""Measure a decoder's distance from exact AR sampling on a model small enough to enumerate.

Every sequence of a tiny layout is scored exactly (teacher-forced forward, same sampling pipeline);
a decoder's samples are compared with a G-test that pools sparse cells (docs/DESIGN.md §6.1) and
with the total-variation distance. The test suite uses it to test the lossless presets for exactness
(a statistical test: :func:`detectable_tv` says how small a bias it sees) and to bound the lossy ones;
users can point it at their own parts.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import torch

from ..core.layout import ImageLayout, VideoLayout
from ..core.sampling import SamplingConfig, TargetPipeline
from ..decode.api import make_decoder
from ..decode.jacobi import Parts
from ..models.transformer import Transformer, TransformerConfig

PROMPT, UNCOND = [5, 6], [7]


def tiny_model(seed: int = 1, vocab: int = 8, sharpness: float = 2.0) -> Transformer:
    """A 2-layer transformer whose conditionals are peaked and depend strongly on context."""
    torch.manual_seed(seed)
    model = Transformer(TransformerConfig(vocab_size=vocab, dim=16, n_layers=2, n_heads=2, max_seq_len=64)).randomize_()
    with torch.no_grad():
        model.head.weight.mul_(sharpness)
    return model.eval()


def layout(eol: bool = True, rows: int = 2, cols: int = 3) -> ImageLayout:
    return ImageLayout(rows, cols, (0, 3), eol_id=3 if eol else None, end_id=4 if eol else None)


def video_layout(frames: int = 2, rows: int = 1, cols: int = 3) -> VideoLayout:
    """A tiny clip with every structural id: end of line (3), end of frame (8), end of clip (4);
    its model needs ``tiny_model(vocab=9)``."""
    return VideoLayout(rows, cols, (0, 3), eol_id=3, end_id=4, frames=frames, eof_id=8)


@dataclass
class Exact:
    sequences: torch.Tensor  # [S, length] every sequence with nonzero probability or not
    probs: np.ndarray  # [S]


def exact_distribution(model, lay: ImageLayout, sampling: SamplingConfig, prompt: list[int] = PROMPT) -> Exact:
    forced = lay.forced()
    free = (forced < 0).nonzero().squeeze(1)
    lo, hi = lay.image_ids
    combos = torch.tensor(list(itertools.product(range(lo, hi), repeat=len(free))))
    seqs = forced.repeat(len(combos), 1)
    seqs[:, free] = combos
    header = list(lay.header)
    rows = [prompt + header] + ([UNCOND + header] if sampling.guided else [])
    logits = []
    with torch.inference_mode():
        for pre in rows:
            inp = torch.cat([torch.tensor(pre).repeat(len(seqs), 1), seqs[:, :-1]], 1)
            logits.append(model(inp)[:, len(pre) - 1 :])
    stacked = torch.stack(logits, 1).flatten(0, 1)  # rows interleaved per sequence
    positions = torch.arange(lay.length).expand(len(seqs), -1)
    targets = TargetPipeline(sampling, lay, model.vocab_size)
    p = targets(stacked, positions)  # over the id span: column i is id lo + i
    logp = p.double().gather(-1, seqs[..., None] - targets.span[0]).squeeze(-1).log().sum(-1)
    return Exact(seqs, logp.exp().numpy())


def sample(model, lay, sampling, parts: Parts, n: int, seed0: int = 0, chunk: int = 5000) -> torch.Tensor:
    out = []
    for start in range(0, n, chunk):
        b = min(chunk, n - start)
        rows = ([PROMPT, UNCOND] if sampling.guided else [PROMPT]) * b
        # thousands of rows share each forward: the law is under test here, not the rounding by batch
        decoder = make_decoder(model, lay, sampling, parts)
        tokens, _ = decoder.run(rows, list(range(seed0 + start, seed0 + start + b)))
        out.append(tokens)
    return torch.cat(out)


def gof_pvalue(exact: Exact, samples: torch.Tensor) -> float:
    """G-test of sampled sequence counts against the exact probabilities, cells with expected
    count < 5 pooled into one bin. A sample the exact model gives probability 0 fails outright."""
    index = {tuple(s): i for i, s in enumerate(exact.sequences.tolist())}
    counts = np.zeros(len(index))
    for s in samples.tolist():
        i = index.get(tuple(s))
        if i is None:
            return 0.0
        counts[i] += 1
    expected = exact.probs / exact.probs.sum() * len(samples)
    if (counts[expected == 0] > 0).any():
        return 0.0
    from scipy import stats as sps  # test extra: only the p-value needs scipy

    res = sps.power_divergence(*pooled(counts, expected), lambda_="log-likelihood")
    return float(res.pvalue)


def pooled(counts: np.ndarray, expected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The G-test's cells: those with expected count >= 5, and one bin that pools the rest."""
    big = expected >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    keep = exp > 0
    return obs[keep], exp[keep]


def gof_cells(exact: Exact, n: int) -> int:
    """How many cells :func:`gof_pvalue` compares for ``n`` samples against ``exact``."""
    expected = exact.probs / exact.probs.sum() * n
    return len(pooled(np.zeros_like(expected), expected)[1])


def detectable_tv(cells: int, n: int, alpha: float = 1e-4, power: float = 0.9) -> float:
    """The smallest total-variation bias over the test's cells that a G-test of ``n`` samples at level
    ``alpha`` rejects with probability ``power``, whatever the bias's shape.

    For large ``n`` the G statistic is noncentral chi-square with ``cells - 1`` degrees of freedom and
    noncentrality about n·chi2(q, p) >= 4n·TV(q, p)² (Cauchy-Schwarz): equality, the hardest bias to see,
    scales p by 1 + 2 TV on half the mass and by 1 - 2 TV on the other half. Biases inside the pooled
    bin are not seen at all."""
    from scipy import optimize, stats

    df = cells - 1
    critical = stats.chi2.isf(alpha, df)
    noncentrality = optimize.brentq(lambda nc: stats.ncx2.sf(critical, df, nc) - power, 1e-9, 1e9)
    return float(np.sqrt(noncentrality / (4 * n)))


def tv_distance(exact: Exact, samples: torch.Tensor) -> float:
    """Total-variation distance between the empirical and the exact distribution."""
    index = {tuple(s): i for i, s in enumerate(exact.sequences.tolist())}
    counts = np.zeros(len(index))
    for s in samples.tolist():
        counts[index[tuple(s)]] += 1
    return 0.5 * float(np.abs(counts / len(samples) - exact.probs / exact.probs.sum()).sum())
