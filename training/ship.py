"""Copy a training export into the package: the one step that changes shipped weights.

Training writes only under checkpoints/; this copies an AR run's export (ar.safetensors and its
words.json), or with --vq the VQ export, into src/jacobigen/weights/ and records what was shipped
(run, step, held-out figure, sha256 of each file) in weights/manifest.json, which the model card
quotes. Shipping a VQ invalidates the AR model's tokens: retokenise and retrain after it.

    python training/ship.py --run ar_words
    python training/ship.py --vq
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil

from common import ROOT, WEIGHTS


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default="ar_words", help="the AR run under checkpoints/ to ship")
    ap.add_argument("--vq", action="store_true", help="ship checkpoints/vq/export instead")
    args = ap.parse_args()
    run = ROOT / "checkpoints" / ("vq" if args.vq else args.run)
    if args.vq:
        files, info = ("vq.safetensors",), json.loads((run / "final.json").read_text())
        record = {"run": "vq", "heldout_psnr": round(info["psnr"], 2)}
    else:
        files, info = ("ar.safetensors", "words.json"), json.loads((run / "best.json").read_text())
        record = {"run": args.run, "step": info["step"], "heldout_code_ce": round(info["heldout_code_ce"], 4)}
    manifest_path = WEIGHTS / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    for name in files:
        shutil.copyfile(run / "export" / name, WEIGHTS / name)
        manifest[name] = {"sha256": sha256(WEIGHTS / name), **record}
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    print(json.dumps(manifest, indent=2))


if __name__ == "__main__":
    main()
