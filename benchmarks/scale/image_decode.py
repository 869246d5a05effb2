"""The memory one image's pixel decode takes at a release's size: each family's image decoder at its
published shape (seeded random weights, float32 as the loaders keep them), one image decoded, in a
fresh process each, its peak resident memory over the process' before it (``VmHWM``).

    python benchmarks/scale/image_decode.py --out benchmarks/scale/image_decode.json

The memory plan counts an image's decode as these bytes per output pixel
(``jacobigen.models.memory.PIXEL_BYTES``): after the tokens are sampled the KV cache is freed, and
each family decodes its images one at a time, so the plan's total is the weights plus the larger of
the decode's working set and one image's pixel decode.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import machine, status  # noqa: E402

# decoder: (release it decodes, image side in pixels, grid side in codes)
DECODERS = {
    "movqgan-270m": ("lumina2-7b", 768, 96),
    "chameleon-vqgan": ("lumina-mgpt-7b", 768, 48),
    "janus-vq": ("janus-pro-1b", 384, 24),
    "llamagen-vq16": ("llamagen-xl-384", 384, 24),
    "emu3-vq": ("emu3-gen", 720, 90),
}


def build(name: str):
    """(decoder, codes -> pixels) at the release's shape."""
    from make_checkpoint import vq_decoder

    torch.manual_seed(0)
    if name == "movqgan-270m":
        from jacobigen.models.movqgan import MoVQDecoder

        m = MoVQDecoder().eval()
        return m, m.decode_codes
    if name in ("chameleon-vqgan", "llamagen-vq16"):
        embed, codes, l2 = (256, 8192, False) if name == "chameleon-vqgan" else (8, 16384, True)
        m = vq_decoder(dict(z=256, ch=128, mult=(1, 1, 2, 2, 4), blocks=2, embed=embed), codes, 0, l2_norm=l2)
        return m, m.decode_codes
    if name == "janus-vq":
        from transformers import JanusConfig, JanusVQVAE

        from jacobigen.models.releases import RELEASES

        m = JanusVQVAE(JanusConfig(**RELEASES["janus-pro-1b"].config).vq_config).eval()
        return m, lambda g: m.decode(g.flatten(1))
    from transformers import Emu3VQVAE, Emu3VQVAEConfig

    m = Emu3VQVAE(Emu3VQVAEConfig()).eval()
    return m, lambda g: m.decode(g)


def one(name: str) -> dict:
    release, side, grid = DECODERS[name]
    model, decode = build(name)
    codes = torch.randint(0, 1000, (1, grid, grid))
    Path("/proc/self/clear_refs").write_text("5")
    before = status("VmRSS")
    start = time.perf_counter()
    with torch.inference_mode():
        pixels = decode(codes)
    peak = status("VmHWM") - before
    return {
        "release": release,
        "pixels": list(pixels.shape[-2:]),
        "parameters": sum(p.numel() for p in model.parameters()),
        "seconds": round(time.perf_counter() - start, 1),
        "peak_over_before_gib": round(peak / 2**30, 3),
        "bytes_per_pixel": round(peak / (pixels.shape[-1] * pixels.shape[-2])),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--only", help="measure this decoder in this process and print its record")
    a = ap.parse_args(argv)
    if a.only:
        print(json.dumps(one(a.only)))
        return
    record = {**machine(), "decoders": {}}
    for name in DECODERS:
        res = subprocess.run([sys.executable, __file__, "--only", name], capture_output=True, text=True)
        if res.returncode:
            raise SystemExit(f"{name}: {res.stderr[-2000:]}")
        record["decoders"][name] = json.loads(res.stdout.strip().splitlines()[-1])
        print(name, record["decoders"][name], file=sys.stderr)
    if a.out:
        a.out.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
