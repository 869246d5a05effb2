"""Has a clip model learnt the direction its caption names? Teacher-forced on held-out drifting clips
(each name's last clip, as train_video.py holds them out), the code NLL of frames 2-8 under the clip's
own caption against the same caption with the opposite direction: a model that reads the direction
finds its own cheaper. (training/clip_motion.py asks the harder question: does a sampled clip move?)

    python training/clip_direction.py --model checkpoints/video_names_drift/export --clips data/clips_names_drift
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from jacobigen.models import embedded as E
from jacobigen.models.transformer import load_transformer

OPPOSITE = {"left": "right", "right": "left", "up": "down", "down": "up"}


@torch.inference_mode()
def later_frames_nll(model, prefix: list[int], clip: list[int]) -> float:
    """Summed NLL of the clip's tokens after its first frame, given ``prefix`` (the caption)."""
    x = torch.tensor([prefix + clip])
    logp = model(x)[0, :-1].float().log_softmax(-1)
    nll = -logp.gather(-1, x[0, 1:, None])[:, 0]
    return nll[len(prefix) - 1 + E.CLIP_FRAME_TOKENS :].sum().item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, required=True, help="an export folder (ar.safetensors, words.json)")
    ap.add_argument("--clips", type=Path, required=True, help="make_clips.py --names output")
    ap.add_argument("--count", type=int, default=24, help="held-out drifting clips to score")
    args = ap.parse_args()
    torch.set_num_threads(1)
    meta = json.loads((args.clips / "clips.json").read_text())
    tokens = np.load(args.clips / "tokens.npy")
    last = max(c["clip"] for c in meta["clips"])
    held = [k for k, c in enumerate(meta["clips"]) if c["clip"] == last and "drifting" in c["caption"].split()]
    reader, model = E.captions_for(args.model), load_transformer(args.model / "ar.safetensors").eval()
    gaps = []
    for k in held[: args.count]:
        caption = meta["clips"][k]["caption"]
        words = caption.split()
        flipped = " ".join(OPPOSITE.get(w, w) for w in words)
        clip = E.clip_tokens(tokens[k], eof=reader.vocab_size)
        own, other = (later_frames_nll(model, reader.tokens(c), clip) for c in (caption, flipped))
        gaps.append(other - own)
    wins = sum(g > 0 for g in gaps)
    print(
        f"own direction cheaper in {wins} of {len(gaps)} held-out drifting clips; opposite minus own: "
        f"median {np.median(gaps):.1f} nats, range {min(gaps):.1f} to {max(gaps):.1f}"
    )


if __name__ == "__main__":
    main()
