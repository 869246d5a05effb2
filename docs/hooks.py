"""MkDocs hooks (``hooks:`` in mkdocs.yml).

- The figures the pages show live beside the data they were drawn from (``benchmarks/``) and in the
  package (``src/jacobigen/weights/``); they are served as ``assets/benchmarks/...`` and
  ``assets/weights/...`` instead of being copied into ``docs/``.
- The embedded models' cards (``src/jacobigen/weights/**/MODEL_CARD.md``) are pages
  ``model-card.md``, ``video-model-card.md`` and ``names-video-model-card.md``.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
ASSETS = {"benchmarks": ROOT / "benchmarks", "weights": ROOT / "src" / "jacobigen" / "weights"}
FIGURES = (".png", ".gif", ".svg", ".jpg")
# the model cards ship in the package beside their weights; the site shows them as pages
CARDS = {
    "model-card.md": ROOT / "src" / "jacobigen" / "weights" / "MODEL_CARD.md",
    "video-model-card.md": ROOT / "src" / "jacobigen" / "weights" / "video" / "MODEL_CARD.md",
    "names-video-model-card.md": ROOT / "src" / "jacobigen" / "weights" / "names-video" / "MODEL_CARD.md",
}


def on_files(files, config):
    for prefix, folder in ASSETS.items():
        for path in sorted(folder.rglob("*")):
            if path.suffix.lower() in FIGURES and path.is_file():
                uri = f"assets/{prefix}/{path.relative_to(folder).as_posix()}"
                files.append(File.generated(config, uri, abs_src_path=str(path)))
    for uri, path in CARDS.items():
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files
