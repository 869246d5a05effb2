"""Copy a training export into the package: the one step that changes shipped weights.

Training writes only under checkpoints/; this copies an AR run's export (ar.safetensors and, for
word captions, its words.json; for a run on the curated names, its names.json) into
src/jacobigen/weights/ (a video run's into weights/video/, a run on the curated names shipped as
the `emoji-names` model into weights/names/, a clip run on them as `emoji-names-video` into
weights/names-video/), or
with --vq the VQ export, and records what was shipped (run, step, held-out figure, sha256 of each
file) in weights/manifest.json, which the model card quotes. Shipping a VQ invalidates the AR
models' tokens: retokenise and retrain after it.

    python training/ship.py --run ar_words
    python training/ship.py --run video --video
    python training/ship.py --run ar_style --into names
    python training/ship.py --run video_names_glide --into names-video
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
    ap.add_argument("--video", action="store_true", help="the run is a video model: ship into weights/video/")
    ap.add_argument(
        "--into",
        choices=["names", "names-video"],
        help="ship a run as another model: weights/names/ (emoji-names), weights/names-video/ (emoji-names-video)",
    )
    args = ap.parse_args()
    if args.into and (args.video or args.vq):
        ap.error("--into names ships an image model, --into names-video a clip model: drop --video and --vq")
    run = ROOT / "checkpoints" / ("vq" if args.vq else args.run)
    dest = WEIGHTS / "video" if args.video else WEIGHTS / args.into if args.into else WEIGHTS
    if args.vq:
        files, info = ["vq.safetensors"], json.loads((run / "final.json").read_text())
        record = {"run": "vq", "heldout_psnr": round(info["psnr"], 2)}
    else:
        files, info = ["ar.safetensors", "words.json", "names.json"], json.loads((run / "best.json").read_text())
        record = {"run": args.run, "step": info["step"], "heldout_code_ce": round(info["heldout_code_ce"], 4)}
        for optional in ("words.json", "names.json"):  # byte captions; captions read as words, not names
            if not (run / "export" / optional).exists():
                files.remove(optional)
                (dest / optional).unlink(missing_ok=True)
    manifest_path = WEIGHTS / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    dest.mkdir(exist_ok=True)
    for name in files:
        shutil.copyfile(run / "export" / name, dest / name)
        manifest[str((dest / name).relative_to(WEIGHTS))] = {"sha256": sha256(dest / name), **record}
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    print(json.dumps(manifest, indent=2))


if __name__ == "__main__":
    main()
