"""Train the embedded animated-emoji model on clip tokens (training/make_clips.py); resumable.

Sequence: [BOS] caption [BOI] F x (16 rows of (16 codes, EOL), EOF) [EOI], captions read as the
--init model reads them (words when a words.json lies beside it, else bytes); EOF is the first id
after the captions'. It starts from the image model (--init, default the shipped one: every weight
copied, new vocabulary rows for EOF and for caption words it lacks) or from a video model (every
weight copied). Held-out clips are those of held-out emoji (data/split.json), so held-out loss
measures new concepts; on clips of the curated names (make_clips.py --names), each name's last clip
(--heldout N: the first N only). Exports go to checkpoints/RUN/export (training/ship.py --video copies one into
the package); `--report` prints the export's held-out code CE per frame index.

Run: python training/make_clips.py --tokenize --frames 4
     python training/train_video.py --threads 2        (rerun the same command to resume)
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from common import DATA, ROOT, WEIGHTS, Log, load_split
from train_ar import IGNORE, Batches, arguments, export, fit

from jacobigen.models import embedded as E
from jacobigen.models.transformer import TransformerConfig, load_transformer


class ClipBatches(Batches):
    """Padded [B, T] clip batches with targets on the clip part (codes, EOL, EOF, EOI)."""

    def __init__(self, tokens: np.ndarray, captions: list[str], reader, indices, drop_caption: float):
        self.tokens, self.captions, self.reader = tokens, captions, reader
        self.indices, self.drop_caption = np.asarray(indices), drop_caption

    def sequence(self, k: int, rng: np.random.Generator) -> tuple[list[int], int]:
        i = self.indices[k]
        prefix = E.unconditional_tokens() if rng.random() < self.drop_caption else self.reader.tokens(self.captions[i])
        return prefix + E.clip_tokens(self.tokens[i], eof=self.reader.vocab_size), len(prefix) - 1


@torch.no_grad()
def frame_ce(model, data: ClipBatches, frames: int, bs: int = 8) -> list[float]:
    """Held-out code CE per frame index: does the model copy what it has already drawn?"""
    model.eval()
    rng = np.random.default_rng(0)
    total, count = np.zeros(frames), np.zeros(frames)
    for s in range(0, len(data.indices), bs):
        x, y, _ = data.make(range(s, min(s + bs, len(data.indices))), rng)
        ce = torch.nn.functional.cross_entropy(
            model(x).flatten(0, 1).float(), y.flatten(), ignore_index=IGNORE, reduction="none"
        ).view_as(y)
        for r in range(len(y)):
            start = int((y[r] != IGNORE).nonzero()[0])
            codes = (y[r] >= 0) & (y[r] < E.CODEBOOK_SIZE)
            frame = ((torch.arange(len(y[r])) - start) // E.CLIP_FRAME_TOKENS).clamp(0, frames - 1)
            np.add.at(total, frame[codes].numpy(), ce[r][codes].numpy())
            np.add.at(count, frame[codes].numpy(), 1)
    return (total / np.maximum(count, 1)).round(4).tolist()


def clip_reader(reader, captions: list[str]):
    """(caption reader, ids shared with the --init model) for clips: a word model's vocabulary grows by
    the motion words its captions use ("drifting", "blinking": new rows, EOF after them), and a
    curated-names model reads every word (its names.json would map "red heart drifting left" onto
    "red heart", dropping the motion)."""
    if not isinstance(reader, E.WordCaptions):
        return reader, reader.vocab_size
    new = [w for w in dict.fromkeys(w for c in captions for w in E.caption_words(c)) if w not in reader.ids]
    return E.WordCaptions([*reader.words, *new]), reader.vocab_size


def main() -> None:
    ap = arguments(__doc__, run="video")
    ap.add_argument("--clips", default=str(DATA / "clips"), help="make_clips.py output (with --tokenize)")
    ap.add_argument("--report", action="store_true", help="print the export's held-out CE per frame and stop")
    ap.add_argument("--heldout", type=int, help="measure on the first N held-out clips only (a faster measurement)")
    ap.set_defaults(batch=8, steps=1500, lr=3e-4, warmup=100, init=WEIGHTS / "ar.safetensors")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ckpt_dir = ROOT / "checkpoints" / args.run

    meta = json.loads((Path(args.clips) / "clips.json").read_text())
    tokens = np.load(Path(args.clips) / "tokens.npy")
    captions = [c["caption"] for c in meta["clips"]]
    if "names" in meta:  # every curated name trains: its last clip (another motion) is held out
        last = max(c["clip"] for c in meta["clips"])
        out = {k for k, c in enumerate(meta["clips"]) if c["clip"] == last}
    else:
        test_images = set(load_split()["test"])
        out = {k for k, c in enumerate(meta["clips"]) if c["image"] in test_images}
    held = sorted(out)[: args.heldout]
    train_idx = [k for k in range(len(captions)) if k not in out]
    reader, shared = clip_reader(E.captions_for(Path(args.init).parent), captions)
    train = ClipBatches(tokens, captions, reader, train_idx, args.drop_caption)
    test = ClipBatches(tokens, captions, reader, held, 0.0)
    if args.report:
        model = load_transformer(ckpt_dir / "export" / "ar.safetensors")
        print(json.dumps({"heldout_code_ce_per_frame": frame_ce(model, test, meta["frames"])}))
        return
    cfg = TransformerConfig(
        vocab_size=reader.vocab_size + 1,
        dim=args.dim,
        n_layers=args.layers,
        n_heads=args.heads,
        max_seq_len=E.clip_seq_len(reader, meta["frames"]),
    )
    words = reader if isinstance(reader, E.WordCaptions) else None
    fit(
        args,
        ckpt_dir,
        Log(ckpt_dir / "train.log"),
        cfg,
        shared,
        train,
        test,
        lambda model, step, loss: export(model, ckpt_dir, step, loss, words, None),
        f"{meta['frames']} frames, {len(train_idx)} train / {len(held)} held-out clips",
    )


if __name__ == "__main__":
    main()
