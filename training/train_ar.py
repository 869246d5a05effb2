"""Train the embedded text-to-image AR transformer on VQ tokens; resumable.

Token layout: jacobigen.models.embedded. Captions vary per example (the emoji's name, name plus keywords,
keywords alone, subgroup plus keywords: data/keywords.json), read as words of a vocabulary built
from the training split. Loss covers the image part only (codes, EOL, EOI); logged losses are
per-token cross-entropy on image *codes*, train and held-out (names as captions) side by side.
Every --export-minutes the held-out loss is measured and, if it improved (or every time, with
--export-when always), the run's export folder (checkpoints/RUN/export: ar.safetensors fp16,
words.json) is rewritten. Nothing is written into the
package: training/ship.py copies an export there. With --cca-lambda the run fine-tunes an --init
export by Condition Contrastive Alignment (cca_loss) instead of likelihood.

Run: python training/train_ar.py --run ar_words --init src/jacobigen/weights/ar.safetensors
     (rerun the same command to resume)
Log: checkpoints/RUN/train.log; checkpoint: checkpoints/RUN/last.pt (+ last_opt.pt)
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections import Counter, defaultdict
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import vocabulary
from common import DATA, ROOT, Log, add_cpu_args, cosine_lr, load_images, load_split, save_atomic
from fetch_data import split_group

from jacobigen.models import embedded as E
from jacobigen.models.transformer import Transformer, TransformerConfig, load_transformer, save_transformer

IGNORE = -100
# Mirroring these would teach mirrored text or wrong flags; they are never flipped.
_NO_FLIP = re.compile(r"\b(flag|keycap|button|letter|digit|sign|symbol|squared|circled)\b")


def mirror_caption(caption: str) -> str:
    return re.sub(r"\b(left|right)\b", lambda m: "right" if m[1] == "left" else "left", caption)


def caption_variant(name: str, keywords: dict, rng: np.random.Generator) -> str:
    """One caption for an image: its name half the time, else up to three of its keywords with the
    name, alone, or after the subgroup, so common words ("face", "red", "cat") recur across
    hundreds of emoji. Images without keywords always get their name."""
    tags = [t for t in keywords["tags"] if t != name]
    r = rng.random()
    if r < 0.5 or not tags:
        return name
    pick = " ".join(rng.choice(tags, size=rng.integers(1, min(3, len(tags)) + 1), replace=False))
    if r < 0.7:
        return f"{name} {pick}"
    if r < 0.85 or not keywords["subgroup"]:
        return pick
    return f"{keywords['subgroup']} {pick}"


def build_vocabulary(captions: list[str], keywords: list[dict], indices, first: list[str] = ()) -> list[str]:
    """Every word the training split's captions can use (names, keywords, groups), most common first,
    after the words of `first` in their order (a model continued from an export keeps its word ids
    when the data changes)."""
    counts = Counter()
    for i in indices:
        kw = keywords[i]
        for text in (captions[i], mirror_caption(captions[i]), *kw["tags"], kw["subgroup"], kw["group"]):
            counts.update(E.caption_words(text))
    known = set(first)
    return [*first, *(w for w, _ in counts.most_common() if w not in known)]


def initial_words(init: Path | None) -> list[str]:
    """The vocabulary of an exported model's caption reader (none for a fresh run or byte captions)."""
    reader = E.captions_for(init.parent) if init else None
    return reader.words if isinstance(reader, E.WordCaptions) else []


def curated_run(
    captions: list[str],
    keywords: list[dict],
    split: dict,
    first: list[str],
    styles: list[str] | None = None,
    sources: Path = DATA / "sources.json",
):
    """A run on the curated names (training/vocabulary.py): every image captioned exactly by one
    (from both splits: a user's "bear" must draw, wherever the held-out rule put it) to train on,
    the other names' held-out images to measure, the vocabulary (``first``, then the names' words
    and their mirrored spellings), and the names.json its export carries.

    ``styles`` (art sets, in preference order) keeps one image per name: the first set's that has
    it. Over seven sets a caption says what to draw but not in which style, and a small model
    drawing from a caption alone mixes the styles' first rows into fragments."""
    names = vocabulary.names_file(captions, keywords)
    known = set(names["names"])
    drawn = [i for i, c in enumerate(captions) if c in known]
    if styles:
        drawn = one_style(drawn, captions, json.loads(sources.read_text()), styles)
    said = dict.fromkeys(w for n in names["names"] for w in E.caption_words(f"{n} {mirror_caption(n)}"))
    words = E.WordCaptions([*first, *(w for w in said if w not in set(first))])
    return {"train": drawn, "test": sorted(set(split["test"]) - set(drawn))}, words, names


def one_style(drawn: list[int], captions: list[str], sources: list[str], styles: list[str]) -> list[int]:
    """Of ``drawn``, per caption the image of the first of ``styles`` that has one."""
    rank = {s: k for k, s in enumerate(styles)}
    best: dict[str, int] = {}
    for i in drawn:
        if sources[i] in rank and (captions[i] not in best or rank[sources[i]] < rank[sources[best[captions[i]]]]):
            best[captions[i]] = i
    if missing := sorted({captions[i] for i in drawn} - set(best)):
        raise SystemExit(f"--style {' '.join(styles)}: no image for {len(missing)} names, e.g. {missing[:5]}")
    return sorted(best.values())


def drawing_rows(images: np.ndarray, white: int = 240) -> np.ndarray:
    """Per image, the first row of its code grid whose pixels hold anything not white: where the
    drawing starts. The codes there decide what the picture becomes: the shipped model completes
    an apple or a sun from their first four rows, yet from a caption alone it starts other shapes."""
    ink = (images < white).any(-1)  # [N, 64, 64]
    rows = ink.reshape(len(images), E.GRID, -1).any(-1)  # [N, 16]: any ink in the row's pixels
    return rows.argmax(1)


class Batches:
    """Builds padded [B, T] token batches with image-only targets and their loss weights."""

    weights: np.ndarray | None = None  # per-example draw probabilities; None: uniform
    vary: bool = True  # training captions vary (caption_variant); False: always the image's name
    first_rows: np.ndarray | None = None  # per dataset image: drawing_rows; None: every target weighs 1

    def __init__(
        self,
        tokens: np.ndarray,
        flipped: np.ndarray,
        captions: list[str],
        keywords: list[dict],
        reader: E.ByteCaptions | E.WordCaptions,
        indices: list[int],
        drop_caption: float,
        train: bool,
    ):
        self.tokens, self.flipped, self.captions, self.keywords = tokens, flipped, captions, keywords
        self.reader, self.indices, self.train = reader, np.asarray(indices), train
        self.drop_caption = drop_caption
        self.flippable = np.array([train and not _NO_FLIP.search(captions[i]) for i in indices])

    def draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n example positions for a training batch."""
        if self.weights is None:
            return rng.integers(0, len(self.indices), n)
        return rng.choice(len(self.indices), size=n, p=self.weights)

    def cap_names(self, images: int) -> None:
        """Give no name more weight than `images` images: a name with skin tones has about 20
        images against 4 for most, so drawing images uniformly gives half the steps to people."""
        names = [split_group(self.captions[i]) for i in self.indices]
        counts = Counter(names)
        w = np.array([1.0 / max(counts[n], images) for n in names])
        self.weights = w / w.sum()

    def weigh_start(self, first_rows: np.ndarray, weight: float, rows: int) -> None:
        """Weigh the targets of each image's first `rows` drawn rows `weight` times in the loss:
        the plain loss weighs them like any other row, yet they fix the shape of the sample."""
        self.first_rows, self.start_weight, self.start_rows = first_rows, weight, rows

    def example(self, k: int, rng: np.random.Generator) -> tuple[str | None, np.ndarray]:
        """The k-th example's caption (None when dropped) and code grid (held out: name, no flip)."""
        i = self.indices[k]
        caption, grid = self.captions[i], self.tokens[i]
        if self.train and self.vary:
            caption = caption_variant(caption, self.keywords[i], rng)
        if self.flippable[k] and rng.random() < 0.5:
            caption, grid = mirror_caption(caption), self.flipped[i]
        return (None if rng.random() < self.drop_caption else caption), grid

    def tokens_of(self, caption: str | None, grid: np.ndarray) -> tuple[list[int], int]:
        """A sequence and the index of its BOI token."""
        prefix = E.unconditional_tokens() if caption is None else self.reader.tokens(caption)
        return prefix + E.image_tokens(grid), len(prefix) - 1

    def sequence(self, k: int, rng: np.random.Generator) -> tuple[list[int], int]:
        return self.tokens_of(*self.example(k, rng))

    def make(self, ks, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Inputs, targets and per-target loss weights (zero where the target is ignored)."""
        ks = list(ks)
        seqs = [self.sequence(k, rng) for k in ks]
        x, y = self.pad(seqs)
        w = (y != IGNORE).float()
        if self.first_rows is not None:
            row = E.GRID + 1
            for r, (k, (_, boi)) in enumerate(zip(ks, seqs, strict=True)):
                start = boi + int(self.first_rows[self.indices[k]]) * row
                w[r, start : start + self.start_rows * row] *= self.start_weight
        return x, y, w

    def make_contrast(self, ks, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """CCA pairs: inputs and targets of the B examples, then of the same images under the next
        example's caption (a roll by one, as the reference code does: a random permutation can leave
        a small batch's captions in place); and per pair whether that caption really differs (a
        dropped caption or the same text counts as a second positive)."""
        examples = [self.example(k, rng) for k in ks]
        captions = [c for c, _ in examples]
        others = captions[1:] + captions[:1]
        mismatched = [c is not None and o is not None and o != c for c, o in zip(captions, others, strict=True)]
        positives = [self.tokens_of(c, g) for c, g in examples]
        negatives = [
            self.tokens_of(o if m else c, g) for (c, g), o, m in zip(examples, others, mismatched, strict=True)
        ]
        x, y = self.pad(positives + negatives)
        return x, y, torch.tensor(mismatched)

    @staticmethod
    def pad(seqs: list[tuple[list[int], int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Right-padded inputs and targets (the image part after BOI; IGNORE elsewhere)."""
        width = max(len(s) for s, _ in seqs)
        x = torch.full((len(seqs), width - 1), E.PAD, dtype=torch.long)
        y = torch.full((len(seqs), width - 1), IGNORE, dtype=torch.long)
        for r, (s, boi) in enumerate(seqs):
            s = torch.tensor(s)
            x[r, : len(s) - 1] = s[:-1]
            y[r, boi : len(s) - 1] = s[boi + 1 :]  # predict everything after BOI
        return x, y


class SelfPlay:
    """Self-play pairs (SPIN; Chen et al. 2024, arXiv 2401.01335): each of the model's own samples
    (training/sample_pool.py) against a real training image of the name it was drawn from, both
    under that name (or, at the caption dropout rate, both under no caption, which trains the
    branch CFG subtracts). Drawn and paired like Batches.make_contrast, so cca_loss raises the real
    image and lowers the sample, each against the frozen reference: the model learns to give the
    fragments it draws less of the probability that real images of the name should have."""

    def __init__(self, pool: Path, data: Batches):
        saved = np.load(pool)
        self.grids, self.names, self.data = saved["grids"], [str(n) for n in saved["names"]], data
        self.indices = np.arange(len(self.grids))
        exact, group = defaultdict(list), defaultdict(list)
        for i in data.indices:
            exact[data.captions[i]].append(i)
            group[split_group(data.captions[i])].append(i)
        self.real = [exact[n] or group[n] for n in self.names]
        if missing := [n for n, r in zip(self.names, self.real, strict=True) if not r]:
            raise SystemExit(f"{pool}: no training image of {missing[:3]}: was the pool drawn from this data?")

    def draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(0, len(self.indices), n)

    def make_contrast(self, ks, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Inputs and targets of B real images, then of the B samples under the same captions; every
        pair is a mismatch (the sample is never the real image's equal)."""
        captions = [None if rng.random() < self.data.drop_caption else self.names[k] for k in ks]
        reals = [self.data.tokens[rng.choice(self.real[k])] for k in ks]
        rows = [self.data.tokens_of(c, g) for c, g in zip(captions, reals, strict=True)]
        rows += [self.data.tokens_of(c, self.grids[k]) for c, k in zip(captions, ks, strict=True)]
        x, y = Batches.pad(rows)
        return x, y, torch.ones(len(ks), dtype=torch.bool)


def compact(opt_state: dict) -> dict:
    """Adam moments in bf16, so each checkpoint file stays under 30 MB (resume barely notices)."""
    state = {
        k: {n: v.bfloat16() if torch.is_tensor(v) and v.dim() > 0 else v for n, v in st.items()}
        for k, st in opt_state["state"].items()
    }
    return {"state": state, "param_groups": opt_state["param_groups"]}


def token_ce(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-target cross-entropy [R, T], zero where the target is ignored."""
    return F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=IGNORE, reduction="none").view(y.shape)


def code_ce_sum(ce: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Summed CE and count over the code targets only (what the logs report)."""
    is_code = (y >= 0) & (y < E.CODEBOOK_SIZE)
    return ce[is_code].sum(), int(is_code.sum())


def cca_loss(
    logp: torch.Tensor, ref_logp: torch.Tensor, mismatched: torch.Tensor, beta: float, lam: float
) -> torch.Tensor:
    """Condition Contrastive Alignment (Chen et al., 2024; arXiv 2410.09347): raise each image's
    likelihood under its own caption and lower it under another's, both relative to the frozen
    reference model, so the model itself draws what CFG would steer it to. Rows: B positives, then
    the B negatives of make_contrast; a negative that is not a real mismatch counts as a positive
    of weight 1, a real one weighs `lam`; the total is divided by `lam`, as in the authors' code."""
    gap = logp - ref_logp
    b = mismatched.shape[0]
    sign = 1.0 - 2.0 * mismatched.float()
    weight = torch.where(mismatched, lam, 1.0)
    loss = -F.logsigmoid(beta * gap[:b]).mean() - (weight * F.logsigmoid(sign * beta * gap[b:])).mean()
    return loss / max(lam, 1.0)


def code_loss(logits: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Weighted mean loss over the image targets, plus the plain summed CE and count over code
    targets only (what the logs report, whatever the weights)."""
    ce = token_ce(logits, y)
    return (ce * w).sum() / w.sum().clamp_min(1), *code_ce_sum(ce, y)


@torch.no_grad()
def mean_code_ce(model: Transformer, data: Batches, bs: int = 32) -> float:
    """Per-code CE over every example of `data` in order (its caption dropout and flips apply)."""
    model.eval()
    rng = np.random.default_rng(0)
    total, count = 0.0, 0
    device = next(model.parameters()).device
    for s in range(0, len(data.indices), bs):
        x, y, w = (t.to(device) for t in data.make(range(s, min(s + bs, len(data.indices))), rng))
        _, ce_sum, n = code_loss(model(x), y, w)
        total, count = total + float(ce_sum), count + n
    model.train()
    return total / max(1, count)


def export(
    model: Transformer, ckpt_dir: Path, step: int, heldout: float, words: E.WordCaptions | None, names: dict | None
) -> None:
    """The run's best model so far (its latest, with --export-when always), as the package would ship
    it (training/ship.py copies it); the vocabulary beside it when it reads word captions, and the
    known names (names.json) when it trained on a curated set. best.json records the exported step
    and held-out loss, which ship.py writes into the manifest."""
    out = ckpt_dir / "export"
    out.mkdir(parents=True, exist_ok=True)
    save_transformer(model, out / "ar.safetensors")
    if words is not None:
        (out / "words.json").write_text(json.dumps({"words": words.words}, ensure_ascii=False))
    if names is not None:
        (out / "names.json").write_text(json.dumps(names, ensure_ascii=False, indent=1))  # as vocabulary.py --write
    info = {
        "step": step,
        "heldout_code_ce": heldout,
        "config": asdict(model.config),
        "params": sum(p.numel() for p in model.parameters()),
    }
    (ckpt_dir / "best.json").write_text(json.dumps(info, indent=2))


def initial_model(cfg: TransformerConfig, init: Path | None, shared: int) -> Transformer:
    """A fresh model, or one started from an exported model: every tensor copied, the token
    embedding and output rows of the first `shared` ids (those both layouts give the same meaning)
    too, other vocabulary rows drawn at the scale of the old ones."""
    model = Transformer(cfg)
    if init is None:
        return model
    old = load_transformer(init).state_dict()
    state = model.state_dict()
    with torch.no_grad():
        for name, tensor in state.items():
            src = old[name]
            if src.shape == tensor.shape:
                tensor.copy_(src)
            else:  # vocabulary-sized rows
                tensor.normal_(0, float(src.float().std()))
                tensor[:shared] = src[:shared]
    model.load_state_dict(state)
    return model


def arguments(doc: str, run: str) -> argparse.ArgumentParser:
    """The options every AR training run takes (model size, schedule, logging, where it lives)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--steps", type=int, default=4800, help="cosine schedule length")
    add_cpu_args(ap)
    ap.add_argument(
        "--device",
        default="cpu",
        help="cpu, or cuda for a GPU (add --bf16 there): the same run, batches built on the CPU",
    )
    ap.add_argument("--drop-caption", type=float, default=0.1)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--ckpt-minutes", type=float, default=5)
    ap.add_argument("--export-minutes", type=float, default=20)
    ap.add_argument(
        "--export-when",
        choices=["better", "always"],
        default="better",
        help="rewrite the export when the held-out loss improved (better) or at every measurement (always: "
        "for runs chosen by another metric, such as caption retrieval)",
    )
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--run", default=run, help="checkpoints/RUN holds the log, checkpoints, export")
    ap.add_argument("--init", type=Path, help="start from this exported ar.safetensors (shape-matched)")
    ap.add_argument(
        "--cca-lambda",
        type=float,
        help="fine-tune with Condition Contrastive Alignment instead of likelihood, with this weight "
        "on mismatched captions (the authors' default: 1000); needs --init, the frozen reference",
    )
    ap.add_argument("--cca-beta", type=float, default=0.02, help="CCA's beta (the authors' default)")
    ap.add_argument(
        "--spin",
        type=Path,
        metavar="POOL",
        help="self-play fine-tuning: cca_loss on real images against the model's own samples in POOL "
        "(training/sample_pool.py) instead of other captions; needs --init (the model that drew POOL)",
    )
    return ap


def bf16_autocast(args) -> torch.autocast:
    """bf16 autocast on the run's device when --bf16 is on, else a no-op context."""
    return torch.autocast(torch.device(args.device).type, dtype=torch.bfloat16, enabled=args.bf16)


def step_loss(model, reference, train: Batches | SelfPlay, ks, rng, args) -> tuple[torch.Tensor, torch.Tensor, int]:
    """One batch's training loss, with the summed code CE and count that the log reports: the plain
    (weighted) likelihood loss, or with a `reference` model CCA on caption pairs (self-play pairs
    with --spin), whose log CE is over the positives."""
    autocast = bf16_autocast(args)
    if reference is None:
        x, y, w = (t.to(args.device) for t in train.make(ks, rng))
        with autocast:
            logits = model(x)
        return code_loss(logits, y, w)
    x, y, mismatched = (t.to(args.device) for t in train.make_contrast(ks, rng))
    with autocast:
        with torch.no_grad():
            ref_logp = -token_ce(reference(x), y).sum(1)
        logits = model(x)
    ce = token_ce(logits, y)  # once: the pairs' likelihoods and the positives' logged code CE
    loss = cca_loss(-ce.sum(1), ref_logp, mismatched, args.cca_beta, args.cca_lambda)
    b = len(mismatched)
    return loss, *code_ce_sum(ce[:b], y[:b])


def fit(
    args,
    ckpt_dir: Path,
    log: Log,
    cfg: TransformerConfig,
    shared: int,
    train: Batches | SelfPlay,
    test: Batches,
    save_export,
    note: str,
) -> None:
    """Train (or resume from ckpt_dir/last.pt) to args.steps; every args.export_minutes measure the
    held-out code CE and call save_export(model, step, loss) when it improved (or every time, with
    --export-when always)."""
    last, last_opt = ckpt_dir / "last.pt", ckpt_dir / "last_opt.pt"
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: this machine has no CUDA device (or torch is a CPU build)")
    ck = torch.load(last, map_location="cpu") if last.exists() else None
    cfg = TransformerConfig(**ck["config"]) if ck else cfg
    model = initial_model(cfg, None if ck else args.init, shared).to(args.device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
    )
    step, best = 0, float("inf")
    if ck:
        model.load_state_dict(ck["model"])
        opt.load_state_dict(torch.load(last_opt, map_location="cpu"))  # casts moments back to fp32
        step, best = ck["step"], ck["best"]
        log(f"resumed from {last} at step {step} (best held-out {best:.4f})")
    else:
        n = sum(p.numel() for p in model.parameters())
        log(
            f"start: {n / 1e6:.2f}M params, config {cfg}, train {len(train.indices)}, "
            f"test {len(test.indices)}, {note}, {vars(args)}"
        )

    def checkpoint() -> None:
        save_atomic(compact(opt.state_dict()), last_opt)
        save_atomic({"model": model.state_dict(), "step": step, "best": best, "config": asdict(cfg)}, last)

    reference = None
    if args.cca_lambda:
        if args.init is None:
            raise SystemExit("--cca-lambda and --spin need --init: the model they align is also their frozen reference")
        reference = initial_model(cfg, args.init, shared).to(args.device).eval().requires_grad_(False)
    model.train()
    t_ckpt = t_export = t_log = time.time()
    ce_sum, ce_n, loss_sum, recent_train = 0.0, 0, 0.0, float("nan")
    while step < args.steps:
        rng = np.random.default_rng(step)
        for g in opt.param_groups:
            g["lr"] = cosine_lr(step, args.steps, args.lr, warmup=args.warmup, floor=0.1)
        loss, code_ce, n = step_loss(model, reference, train, train.draw(args.batch, rng), rng, args)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        ce_sum, ce_n, loss_sum = ce_sum + code_ce.item(), ce_n + n, loss_sum + loss.item()

        if step % args.log_every == 0:
            recent_train = ce_sum / ce_n
            log(
                f"step {step} train_code_ce {recent_train:.4f} loss {loss_sum / args.log_every:.4f} "
                f"lr {opt.param_groups[0]['lr']:.2e} {(time.time() - t_log) / args.log_every:.2f}s/step"
            )
            ce_sum, ce_n, loss_sum, t_log = 0.0, 0, 0.0, time.time()
        if time.time() - t_export > 60 * args.export_minutes or step == args.steps:
            t_eval = time.time()
            with bf16_autocast(args):
                held = mean_code_ce(model, test)
            improved, best = held < best, min(best, held)
            tags = ["best"] if improved else []
            if improved or args.export_when == "always":
                save_export(model, step, held)
                tags.append("exported")
            log(
                f"step {step} train_code_ce {recent_train:.4f} heldout_code_ce {held:.4f}"
                + (f" ({', '.join(tags)})" if tags else "")
            )
            t_export = time.time()
            t_log += t_export - t_eval  # s/step reports training only
        if time.time() - t_ckpt > 60 * args.ckpt_minutes:
            checkpoint()
            t_ckpt = time.time()
    checkpoint()


def main() -> None:
    ap = arguments(__doc__, run="ar_words")
    ap.add_argument("--cap-name", type=int, help="weigh no name above this many images (Batches.cap_names)")
    ap.add_argument(
        "--start-weight",
        type=float,
        default=1.0,
        help="loss weight of the targets in each image's first --start-rows drawn rows (Batches.weigh_start)",
    )
    ap.add_argument("--start-rows", type=int, default=3)
    ap.add_argument(
        "--names",
        action="store_true",
        help="train on the curated names only (training/vocabulary.py), each image under its exact name, "
        "from both splits; the export gets the names.json the package reads prompts with",
    )
    ap.add_argument(
        "--style",
        nargs="+",
        metavar="SET",
        help="with --names: one image per name, from the first of these art sets (data/sources.json) that has "
        "it, e.g. twemoji noto fluent openmoji (curated_run)",
    )
    args = ap.parse_args()
    if args.style and not args.names:
        ap.error("--style picks among the curated names' images: add --names")
    if args.spin and (args.cap_name or args.start_weight != 1.0):
        ap.error("--spin draws its pool's names evenly and scores whole images: drop --cap-name and --start-weight")
    torch.set_num_threads(args.threads)
    ckpt_dir = ROOT / "checkpoints" / args.run
    log = Log(ckpt_dir / "train.log")

    split = load_split()
    captions = json.loads((DATA / "captions.json").read_text())
    keywords = json.loads((DATA / "keywords.json").read_text())
    tokens, flipped = np.load(DATA / "tokens.npy"), np.load(DATA / "tokens_flip.npy")
    first = initial_words(args.init)
    names = None
    if args.names:
        split, words, names = curated_run(captions, keywords, split, first, args.style)
    else:
        words = E.WordCaptions(build_vocabulary(captions, keywords, split["train"], first))
    train = Batches(tokens, flipped, captions, keywords, words, split["train"], args.drop_caption, train=True)
    train.vary = not args.names
    test = Batches(tokens, flipped, captions, keywords, words, split["test"], 0.0, train=False)
    if args.cap_name:
        train.cap_names(args.cap_name)
    if args.start_weight != 1.0:
        train.weigh_start(drawing_rows(load_images()), args.start_weight, args.start_rows)
    if args.spin:
        train = SelfPlay(args.spin, train)
        args.cca_lambda = args.cca_lambda or 1.0
    cfg = TransformerConfig(
        vocab_size=words.vocab_size,
        dim=args.dim,
        n_layers=args.layers,
        n_heads=args.heads,
        max_seq_len=E.max_seq_len(words),
    )
    fit(
        args,
        ckpt_dir,
        log,
        cfg,
        E.WORD_OFFSET + len(first) if first else E.UNK,
        train,
        test,
        lambda model, step, held: export(model, ckpt_dir, step, held, words, names),
        f"{len(words.words)} words",
    )


if __name__ == "__main__":
    main()
