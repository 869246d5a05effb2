"""Train the embedded text-to-image AR transformer on VQ tokens; resumable.

Token layout: jacobigen.embedded. Loss covers the image part only (codes, EOL,
EOI); logged losses are per-token cross-entropy on image *codes*, train and
held-out side by side. Every --export-minutes the held-out loss is measured and,
if it improved, weights/ar.safetensors (fp16) is rewritten, so the shipped
file is always the best-generalising model so far.

Run: python training/train_ar.py      (rerun the same command to resume)
Log: checkpoints/ar/train.log; checkpoint: checkpoints/ar/last.pt (+ last_opt.pt)
"""
from __future__ import annotations

import argparse
import json
import re
import time
from dataclasses import asdict

import numpy as np
import torch
import torch.nn.functional as F
from common import DATA, ROOT, WEIGHTS, Log, add_cpu_args, cosine_lr, load_split, save_atomic

from jacobigen import embedded as E
from jacobigen.model import Transformer, TransformerConfig, save_transformer

CKPT_DIR = ROOT / "checkpoints" / "ar"
IGNORE = -100
# Mirroring these would teach mirrored text or wrong flags; they are never flipped.
_NO_FLIP = re.compile(r"\b(flag|keycap|button|letter|digit|sign|symbol|squared|circled)\b")


def mirror_caption(caption: str) -> str:
    return re.sub(r"\b(left|right)\b", lambda m: "right" if m[1] == "left" else "left", caption)


class Batches:
    """Builds padded [B, T] token batches with image-only targets."""

    def __init__(self, tokens: np.ndarray, flipped: np.ndarray, captions: list[str],
                 indices: list[int], drop_caption: float, flip: bool):
        self.tokens, self.flipped, self.captions = tokens, flipped, captions
        self.indices = np.asarray(indices)
        self.drop_caption = drop_caption
        self.flippable = np.array([flip and not _NO_FLIP.search(captions[i]) for i in indices])

    def sequence(self, k: int, rng: np.random.Generator) -> tuple[list[int], int]:
        """Sequence for the k-th example and the index of its BOI token."""
        i = self.indices[k]
        caption, grid = self.captions[i], self.tokens[i]
        if self.flippable[k] and rng.random() < 0.5:
            caption, grid = mirror_caption(caption), self.flipped[i]
        prefix = (E.unconditional_tokens() if rng.random() < self.drop_caption
                  else E.caption_tokens(caption))
        return prefix + E.image_tokens(grid), len(prefix) - 1

    def make(self, ks, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        seqs = [self.sequence(k, rng) for k in ks]
        width = max(len(s) for s, _ in seqs)
        x = torch.full((len(seqs), width - 1), E.PAD, dtype=torch.long)
        y = torch.full((len(seqs), width - 1), IGNORE, dtype=torch.long)
        for r, (s, boi) in enumerate(seqs):
            s = torch.tensor(s)
            x[r, : len(s) - 1] = s[:-1]
            y[r, boi: len(s) - 1] = s[boi + 1:]  # predict everything after BOI
        return x, y


def compact(opt_state: dict) -> dict:
    """Adam moments in bf16, so each checkpoint file stays under 30 MB (resume barely notices)."""
    state = {k: {n: v.bfloat16() if torch.is_tensor(v) and v.dim() > 0 else v for n, v in st.items()}
             for k, st in opt_state["state"].items()}
    return {"state": state, "param_groups": opt_state["param_groups"]}


def code_loss(logits: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Loss over all image targets, plus the summed CE and count over code targets only."""
    ce = F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=IGNORE, reduction="none")
    is_code = (y.flatten() >= 0) & (y.flatten() < E.CODEBOOK_SIZE)
    n_image = (y != IGNORE).sum().clamp_min(1)
    return ce.sum() / n_image, ce[is_code].sum(), int(is_code.sum())


@torch.no_grad()
def mean_code_ce(model: Transformer, data: Batches, bs: int = 32) -> float:
    """Per-code CE over every example of `data` in order (its caption dropout and flips apply)."""
    model.eval()
    rng = np.random.default_rng(0)
    total, count = 0.0, 0
    for s in range(0, len(data.indices), bs):
        x, y = data.make(range(s, min(s + bs, len(data.indices))), rng)
        _, ce_sum, n = code_loss(model(x), y)
        total, count = total + float(ce_sum), count + n
    model.train()
    return total / max(1, count)


def export(model: Transformer, step: int, heldout: float) -> None:
    WEIGHTS.mkdir(parents=True, exist_ok=True)
    save_transformer(model, WEIGHTS / "ar.safetensors")
    info = {"step": step, "heldout_code_ce": heldout, "config": asdict(model.config),
            "params": sum(p.numel() for p in model.parameters())}
    (CKPT_DIR / "best.json").write_text(json.dumps(info, indent=2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--steps", type=int, default=4800, help="cosine schedule length")
    add_cpu_args(ap)
    ap.add_argument("--drop-caption", type=float, default=0.1)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--ckpt-minutes", type=float, default=5)
    ap.add_argument("--export-minutes", type=float, default=20)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    log = Log(CKPT_DIR / "train.log")

    split = load_split()
    captions = json.loads((DATA / "captions.json").read_text())
    tokens, flipped = np.load(DATA / "tokens.npy"), np.load(DATA / "tokens_flip.npy")
    train = Batches(tokens, flipped, captions, split["train"], args.drop_caption, flip=True)
    test = Batches(tokens, flipped, captions, split["test"], 0.0, flip=False)

    last, last_opt = CKPT_DIR / "last.pt", CKPT_DIR / "last_opt.pt"
    ck = torch.load(last, map_location="cpu") if last.exists() else None
    cfg = (TransformerConfig(**ck["config"]) if ck else
           TransformerConfig(vocab_size=E.VOCAB_SIZE, dim=args.dim, n_layers=args.layers,
                             n_heads=args.heads, max_seq_len=E.MAX_SEQ_LEN))
    model = Transformer(cfg)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    step, best = 0, float("inf")
    if ck:
        model.load_state_dict(ck["model"])
        opt.load_state_dict(torch.load(last_opt, map_location="cpu"))  # casts moments back to fp32
        step, best = ck["step"], ck["best"]
        log(f"resumed from {last} at step {step} (best held-out {best:.4f})")
    else:
        n = sum(p.numel() for p in model.parameters())
        log(f"start: {n / 1e6:.2f}M params, config {cfg}, train {len(train.indices)}, "
            f"test {len(test.indices)}, {vars(args)}")

    def checkpoint() -> None:
        save_atomic(compact(opt.state_dict()), last_opt)
        save_atomic({"model": model.state_dict(), "step": step, "best": best,
                     "config": asdict(cfg)}, last)

    model.train()
    t_ckpt = t_export = t_log = time.time()
    ce_sum, ce_n, recent_train = 0.0, 0, float("nan")
    while step < args.steps:
        rng = np.random.default_rng(step)
        x, y = train.make(rng.integers(0, len(train.indices), args.batch), rng)
        for g in opt.param_groups:
            g["lr"] = cosine_lr(step, args.steps, args.lr, warmup=300, floor=0.1)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            logits = model(x)
        loss, code_ce, n = code_loss(logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        ce_sum, ce_n = ce_sum + code_ce.item(), ce_n + n

        if step % args.log_every == 0:
            recent_train = ce_sum / ce_n
            log(f"step {step} train_code_ce {recent_train:.4f} lr {opt.param_groups[0]['lr']:.2e} "
                f"{(time.time() - t_log) / args.log_every:.2f}s/step")
            ce_sum, ce_n, t_log = 0.0, 0, time.time()
        if time.time() - t_export > 60 * args.export_minutes or step == args.steps:
            t_eval = time.time()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                held = mean_code_ce(model, test)
            improved = held < best
            if improved:
                best = held
                export(model, step, held)
            log(f"step {step} train_code_ce {recent_train:.4f} heldout_code_ce {held:.4f}"
                + (" (best, exported)" if improved else ""))
            t_export = time.time()
            t_log += t_export - t_eval  # s/step reports training only
        if time.time() - t_ckpt > 60 * args.ckpt_minutes:
            checkpoint()
            t_ckpt = time.time()
    checkpoint()


if __name__ == "__main__":
    main()
