"""Mean entropy of the shipped model's next-token distributions on its own images (model card).

Image tokens must stay high-entropy: a model that memorised its data would make every Jacobi
method look better than it is on real models. Samples images with ``sjd`` (lossless: these are AR
samples) at the recommended sampling (cfg 3, top-k 200), re-scores them teacher-forced and
averages the entropy over image-code positions, of the raw conditional model (temperature 1) and
of the sampling target.

    python training/entropy.py --images 16
    python training/entropy.py --images 16 --model emoji-names   # at its own sampling (cfg 1)
"""

from __future__ import annotations

import argparse

import torch

from jacobigen.core.sampling import SamplingConfig, target_probs
from jacobigen.models import EMBEDDED_PROMPTS, load_bundle
from jacobigen.models import embedded as E
from jacobigen.models.bundle import encode_one


def entropy(p: torch.Tensor) -> torch.Tensor:
    return -(p * p.clamp(min=1e-30).log()).sum(-1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=16)
    ap.add_argument("--model", default="default", help="a --model spec of an emoji model (default: the shipped one)")
    args = ap.parse_args()
    pipe = load_bundle(args.model, "cpu")
    prompts = (EMBEDDED_PROMPTS * args.images)[: args.images]
    gen, _ = pipe.generate(prompts, method="sjd", window=16, seed=list(range(args.images)), batch_size=16)
    layout, model = pipe.layout, pipe.model
    codes = torch.tensor([layout.forced()[i] < 0 for i in range(layout.length)])  # image-code positions
    raw, target = [], []
    sampling = SamplingConfig(**pipe.defaults)
    with torch.inference_mode():
        for text, toks in zip(prompts, gen.tokens, strict=True):
            _, cond, uncond = encode_one(pipe, text)
            rows = [cond, uncond]
            logits = []
            for pre in rows:
                inp = torch.tensor(pre + toks[:-1].tolist())[None]
                logits.append(model(inp)[0, len(pre) - 1 :])
            cond = logits[0][codes]
            raw.append(entropy(torch.softmax(cond, -1)))
            pair = torch.stack([logits[0][codes], logits[1][codes]])  # cond, uncond rows
            p = target_probs(pair, sampling, layout.allowed(model.vocab_size))
            target.append(entropy(p[0]))
    raw, target = torch.cat(raw), torch.cat(target)
    print(
        f"{args.images} images ({E.GRID}x{E.GRID} codes each): mean next-token entropy "
        f"{raw.mean():.2f} nats at temperature 1, {target.mean():.2f} with cfg {sampling.cfg} "
        f"and top-k {sampling.top_k} (uniform over {E.CODEBOOK_SIZE} codes: 6.93)"
    )


if __name__ == "__main__":
    main()
