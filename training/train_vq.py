"""Train the VQ tokenizer on the train split; resumable; exports weights/vq.safetensors.

Run: python training/train_vq.py      (rerun the same command to resume)
Log: checkpoints/vq/train.log; checkpoint: checkpoints/vq/last.pt
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F
from common import ROOT, Log, add_cpu_args, cosine_lr, load_images, load_split, save_atomic

from jacobigen.models.vq import VQConfig, VQModel, codebook_stats

CKPT_DIR = ROOT / "checkpoints" / "vq"


def augment(batch: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Random horizontal flips and colour-channel permutations (uint8 [B,3,H,W])."""
    b = batch.shape[0]
    flip = torch.rand(b, generator=gen) < 0.5
    batch = torch.where(flip[:, None, None, None], batch.flip(-1), batch)
    perm = torch.rand(b, generator=gen) < 0.25
    if perm.any():
        order = torch.randperm(3, generator=gen)
        batch[perm] = batch[perm][:, order]
    return batch


@torch.no_grad()
def evaluate(model: VQModel, images: torch.Tensor, bs: int = 128) -> dict[str, float]:
    """Mean per-image PSNR (range [0,1]) of decode(encode(x)) and codebook usage."""
    model.eval()
    psnrs, ids = [], []
    for i in range(0, len(images), bs):
        x = images[i : i + bs]
        codes = model.encode(x)
        rec = model.decode(codes)
        mse = ((rec - x.float() / 255.0) ** 2).flatten(1).mean(1).clamp_min(1e-10)
        psnrs.append(-10 * torch.log10(mse))
        ids.append(codes)
    model.train()
    stats = codebook_stats(torch.cat(ids), model.config.codebook_size)
    return {"psnr": float(torch.cat(psnrs).mean()), **stats}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4800)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    add_cpu_args(ap)
    ap.add_argument("--eval-every", type=int, default=300)
    ap.add_argument("--ckpt-every", type=int, default=100)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    log = Log(CKPT_DIR / "train.log")

    split = load_split()
    images = torch.from_numpy(load_images()).permute(0, 3, 1, 2).contiguous()
    train, test = images[split["train"]], images[split["test"]]

    model = VQModel(VQConfig())
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, 0.99))
    step = 0
    last = CKPT_DIR / "last.pt"
    if last.exists():
        ck = torch.load(last, map_location="cpu")
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        model.quantizer.usage.copy_(ck["usage"])
        step = ck["step"]
        log(f"resumed from {last} at step {step}")
    else:
        n = sum(p.numel() for p in model.parameters())
        log(f"start: {n / 1e6:.2f}M params, train {len(train)}, test {len(test)}, {vars(args)}")

    def checkpoint() -> None:
        save_atomic(
            {"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "usage": model.quantizer.usage}, last
        )

    model.train()
    t0, run_loss = time.time(), 0.0
    while step < args.steps:
        gen = torch.Generator().manual_seed(step)
        idx = torch.randint(0, len(train), (args.batch,), generator=gen)
        batch = augment(train[idx].clone(), gen)
        target = batch.float() / 127.5 - 1.0
        for g in opt.param_groups:
            g["lr"] = cosine_lr(step, args.steps, args.lr, warmup=100)

        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            rec, ids, vq_loss, z = model(batch)
        rec_loss = F.l1_loss(rec, target) + F.mse_loss(rec, target)
        loss = rec_loss + vq_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        run_loss += rec_loss.item()
        step += 1

        if step < 0.8 * args.steps and (step == 1 or step % 50 == 0):
            restarted = model.quantizer.restart_dead(z.detach(), threshold=0.03)
            if restarted:
                log(f"step {step}: restarted {restarted} dead codes")
        if step % 50 == 0:
            log(
                f"step {step} train_rec_loss {run_loss / 50:.4f} "
                f"lr {opt.param_groups[0]['lr']:.2e} {(time.time() - t0) / 50:.2f}s/step"
            )
            run_loss, t0 = 0.0, time.time()
        if step % args.ckpt_every == 0:
            checkpoint()
        if step % args.eval_every == 0 or step == args.steps:
            s = evaluate(model, test)
            log(f"step {step} test_psnr {s['psnr']:.2f} perplexity {s['perplexity']:.0f} used {s['used']:.3f}")
    checkpoint()
    export(model, test, log)


def export(model: VQModel, test: torch.Tensor, log: Log) -> None:
    """Write fp16 weights to checkpoints/vq/export (training/ship.py --vq copies them into the
    package) and re-evaluate through the file, as users will load it."""
    path = CKPT_DIR / "export" / "vq.safetensors"
    path.parent.mkdir(parents=True, exist_ok=True)
    model.save(path)
    s = evaluate(VQModel.load(path), test)
    s["params"] = sum(p.numel() for p in model.parameters())
    s["bytes"] = path.stat().st_size
    (CKPT_DIR / "final.json").write_text(json.dumps(s, indent=2))
    log(
        f"exported {path} ({s['bytes'] / 1e6:.1f} MB): test_psnr {s['psnr']:.2f} "
        f"perplexity {s['perplexity']:.0f} used {s['used']:.3f}"
    )


if __name__ == "__main__":
    main()
