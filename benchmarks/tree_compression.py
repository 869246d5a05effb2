#!/usr/bin/env python
"""Step compression with enough images to tell the tree settings apart (no timing).

A single image's forward count varies by about 20 around its mean on the embedded model, so the
two-prompt timing bench cannot separate settings a few percent apart. This decodes every
(method variant, window) on ``--prompts`` x ``--seeds`` images in batches (continuous refill) and
reports the mean forward passes per image with its standard error, the step compression against
AR's fixed count, and the tokens committed from off-spine tree nodes.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch
from tqdm.auto import tqdm

from jacobigen.decode.api import generate
from jacobigen.decode.methods import parse_variant, split_variants
from jacobigen.models import load_bundle
from jacobigen.models.bundle import encode_one
from jacobigen.tools.bench import unbuildable
from jacobigen.tools.threads import choose_threads

DEFAULT = (
    "scd-mc,sjd-pac,sjd-pac[tree_min_gain=0],sjd-pac[tree_budget=full],sjd-pac[tree_budget=6],"
    "sjd-pac[tree_depth=4,tree_budget=full,window=113]"
)


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="emoji")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], help="the model dtype (default: its own here)")
    ap.add_argument("--methods", default=DEFAULT)
    ap.add_argument("--windows", default="16,32,64")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--seeds", type=int, default=24)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    pipe = load_bundle(args.model, dtype=args.dtype)
    choose_threads(pipe.model, None)
    prompts = (pipe.example_prompts * args.prompts)[: args.prompts]
    windows = [int(w) for w in args.windows.split(",")]
    jobs = [
        (v, w) for v in map(parse_variant, split_variants(args.methods)) for w in ([v.window] if v.window else windows)
    ]
    jobs = [(v, w) for v, w in jobs if unbuildable(v, w) is None]
    lines = [
        f"Step compression on the {pipe.name} model: {len(prompts)} prompts x {args.seeds} seeds per row "
        f"(`python benchmarks/tree_compression.py`), AR takes {pipe.layout.length} forward passes per image.",
        "",
        "| method | window | NFE/image (± s.e.) | step compression | sibling tokens/image |",
        "|---|---|---|---|---|",
    ]
    for v, w in tqdm(jobs, desc="compression", unit="row"):
        nfe, siblings = [], 0
        for prompt in prompts:
            model, tokens, uncond = encode_one(pipe, prompt)
            g = generate(
                model,
                tokens,
                layout=pipe.layout,
                uncond=uncond,
                method=v.method.name,
                window=w,
                seed=list(range(args.seeds)),
                batch_size=args.batch,
                **v.options,
                **pipe.defaults,
            )
            nfe += g.stats.sequence_nfe
            siblings += sum(g.stats.sibling_tokens)
        mean, se = statistics.mean(nfe), statistics.stdev(nfe) / len(nfe) ** 0.5
        lines.append(
            f"| {v.label} | {w} | {mean:.1f} ± {se:.1f} | {pipe.layout.length / mean:.2f}x | "
            f"{siblings / len(nfe):.1f} |"
        )
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(text)
    return text


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    main()
