"""Draw a sample grid from the exported weights, for eyeballing and the model card.

Plain AR sampling with classifier-free guidance, using only the model and its
KV cache (not the decoding engine), so it checks the weights, not the engine.

Run: python training/sample_grid.py --out src/jacobigen/weights/samples.png "red heart" "cat face"
"""
from __future__ import annotations

import argparse

import numpy as np
import torch
from PIL import Image

from common import WEIGHTS
from jacobigen import embedded as E
from jacobigen.model import load_transformer
from jacobigen.vq import VQModel


def _mask(allowed: torch.Tensor) -> torch.Tensor:
    return torch.where(allowed, 0.0, float("-inf"))[:, None]


@torch.no_grad()
def sample_codes(model, prompts: list[str], cfg_scale: float, temperature: float, top_k: int,
                 seed: int) -> torch.Tensor:
    """Codes [B, 16, 16]; cond rows then uncond rows, each with its own prefix length."""
    gen = torch.Generator().manual_seed(seed)
    prefixes = [E.caption_tokens(p) for p in prompts] + [E.unconditional_tokens()] * len(prompts)
    rows, width = len(prefixes), max(map(len, prefixes))
    lengths = torch.tensor([len(p) for p in prefixes])
    tokens = torch.full((rows, width), E.PAD, dtype=torch.long)
    for r, p in enumerate(prefixes):
        tokens[r, : len(p)] = torch.tensor(p)
    cache = model.new_cache(rows, width + E.IMAGE_TOKENS)
    slots = torch.arange(cache.capacity)
    prefill = _mask((slots[None, None, :] <= torch.arange(width)[None, :, None]).expand(rows, -1, -1))
    logits = model(tokens, torch.arange(width).expand(rows, -1), prefill, cache)
    logits = logits[torch.arange(rows), lengths - 1]
    cache.commit(torch.arange(width).expand(rows, -1), lengths)

    b = len(prompts)
    codes = torch.zeros(b, E.GRID, E.GRID, dtype=torch.long)
    for row in range(E.GRID):
        for col in range(E.GRID + 1):
            if col == E.GRID:  # end of row is forced
                nxt = torch.full((b,), E.EOL)
            else:
                guided = logits[:b] + cfg_scale * (logits[:b] - logits[b:])
                guided = guided[:, : E.CODEBOOK_SIZE] / temperature
                kth = guided.topk(top_k, dim=-1).values[:, -1:]
                probs = guided.masked_fill(guided < kth, float("-inf")).softmax(-1)
                nxt = torch.multinomial(probs, 1, generator=gen).squeeze(1)
                codes[:, row, col] = nxt
            pos = cache.lengths[:, None]
            step_mask = _mask((slots[None, :] <= pos)[:, None, :])
            logits = model(torch.cat([nxt, nxt])[:, None], pos, step_mask, cache)[:, -1]
            cache.commit(torch.zeros(rows, 1, dtype=torch.long), torch.ones(rows, dtype=torch.long))
    return codes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prompts", nargs="+")
    ap.add_argument("--out", default="samples.png")
    ap.add_argument("--per-prompt", type=int, default=4)
    ap.add_argument("--cfg", type=float, default=3.0)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-k", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    model = load_transformer(WEIGHTS / "ar.safetensors")
    vq = VQModel.load(WEIGHTS / "vq.safetensors")
    prompts = [p for p in args.prompts for _ in range(args.per_prompt)]
    codes = sample_codes(model, prompts, args.cfg, args.temperature, args.top_k, args.seed)
    images = (vq.decode(codes).permute(0, 2, 3, 1).numpy() * 255).round().astype(np.uint8)
    n, k = len(args.prompts), args.per_prompt
    grid = images.reshape(n, k, 64, 64, 3).transpose(0, 2, 1, 3, 4).reshape(n * 64, k * 64, 3)
    Image.fromarray(grid).save(args.out)
    print(f"wrote {args.out}: rows = {args.prompts}")


if __name__ == "__main__":
    main()
