"""Build the emoji text-to-image dataset used to train the embedded model.

Downloads pinned npm packages (cached in data/raw/), renders every emoji to a
64x64 RGB image composited on white, and writes:

  data/images.npy     uint8 [N, 64, 64, 3]
  data/captions.json  list[str], lowercase CLDR-style names ("red heart")
  data/sources.json   list[str], source id per image (keys of SOURCES)
  data/split.json     {"train": [...], "test": [...], "rule": "..."}
  data/licences.json  SOURCES, for the model card
  data/keywords.json  per image: CLDR keywords, group and subgroup words (emojibase-data), so
                      captions can vary and share words across emoji

The test split holds out whole emoji *names* (skin-tone variants grouped with
their base), so an emoji seen in one style is never tested in another style.

Run: python training/fetch_data.py   (idempotent; downloads only once)
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import re
import subprocess
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
from PIL import Image

SIZE = 64
SVG_NS = "http://www.w3.org/2000/svg"
TEST_FRACTION = 0.05
ROOT = Path(__file__).resolve().parents[1]

SOURCES = {
    "noto": {
        "npm": "emoji-datasource-google@16.0.0",
        "artwork": "Noto Emoji, Google",
        "licence": "Apache-2.0",
        "url": "https://github.com/googlefonts/noto-emoji",
        "attribution": "Noto Emoji by Google, Apache License 2.0 (via emoji-datasource, MIT).",
    },
    "twemoji": {
        "npm": "emoji-datasource-twitter@16.0.0",
        "artwork": "Twemoji, Twitter Inc. and contributors",
        "licence": "CC-BY-4.0",
        "url": "https://github.com/jdecked/twemoji",
        "attribution": "Twemoji graphics by Twitter, Inc and other contributors, CC BY 4.0.",
    },
    "openmoji": {
        "npm": "openmoji@17.0.0",
        "artwork": "OpenMoji",
        "licence": "CC-BY-SA-4.0",
        "url": "https://openmoji.org",
        "attribution": "OpenMoji, the open-source emoji and icon project, CC BY-SA 4.0.",
    },
    "fluent": {
        "npm": "@iconify-json/fluent-emoji-flat@1.2.6",
        "artwork": "Fluent Emoji (flat), Microsoft",
        "licence": "MIT",
        "url": "https://github.com/microsoft/fluentui-emoji",
        "attribution": "Fluent Emoji by Microsoft Corporation, MIT License.",
    },
    "noto-v1": {
        "npm": "@iconify-json/noto-v1@1.2.5",
        "artwork": "Noto Emoji v1 (the earlier design), Google",
        "licence": "Apache-2.0",
        "url": "https://github.com/googlefonts/noto-emoji",
        "attribution": "Noto Emoji (v1) by Google Inc, Apache License 2.0 (via Iconify).",
    },
    "emojione": {
        "npm": "@iconify-json/emojione@1.2.3",
        "artwork": "Emoji One 2.3 (coloured)",
        "licence": "CC-BY-4.0",
        "url": "https://github.com/EmojiTwo/emojitwo",
        "attribution": "Emoji One artwork (2.3), CC BY 4.0 (via Iconify).",
    },
    "emojione-v1": {
        "npm": "@iconify-json/emojione-v1@1.2.3",
        "artwork": "Emoji One 1.5",
        "licence": "CC-BY-SA-4.0",
        "url": "https://github.com/joypixels/emojione-legacy",
        "attribution": "Emoji One artwork (1.5), CC BY-SA 4.0 (via Iconify).",
    },
}

KEYWORDS = {
    "npm": "emojibase-data@17.0.0",
    "data": "Emojibase: CLDR emoji names, keywords, groups and subgroups",
    "licence": "MIT (data derived from Unicode CLDR, Unicode License v3)",
    "url": "https://emojibase.dev",
    "attribution": "Emojibase data by Miles Johnson, MIT License; CLDR annotations, Unicode License v3.",
}

SKIN_TONES = {
    "1F3FB": "light skin tone",
    "1F3FC": "medium-light skin tone",
    "1F3FD": "medium skin tone",
    "1F3FE": "medium-dark skin tone",
    "1F3FF": "dark skin tone",
}
_TONE_RE = re.compile(r"\b(light|medium-light|medium|medium-dark|dark) skin tone\b")


class Tarball:
    """Read members of a cached npm tarball by their path inside the package."""

    def __init__(self, path: Path):
        self._tar = tarfile.open(path, "r:gz")
        self._members = {m.name.split("/", 1)[1]: m for m in self._tar.getmembers() if m.isfile()}

    def has(self, name: str) -> bool:
        return name in self._members

    def names(self) -> list[str]:
        return list(self._members)

    def read(self, name: str) -> bytes:
        return self._tar.extractfile(self._members[name]).read()

    def json(self, name: str):
        return json.loads(self.read(name))


def npm_pack(spec: str, raw_dir: Path) -> Path:
    """Download `spec` with `npm pack` once; later runs reuse the tarball."""
    stem = spec.lstrip("@").replace("/", "-").replace("@", "-")
    path = raw_dir / f"{stem}.tgz"
    if not path.exists():
        raw_dir.mkdir(parents=True, exist_ok=True)
        out = (
            subprocess.run(["npm", "pack", spec, "--silent"], cwd=raw_dir, check=True, capture_output=True, text=True)
            .stdout.strip()
            .splitlines()[-1]
        )
        (raw_dir / out).rename(path)
    return path


def to_rgb64(img: Image.Image) -> np.ndarray:
    """Composite RGBA on white and resize to SIZE x SIZE (LANCZOS)."""
    img = img.convert("RGBA")
    canvas = Image.new("RGBA", img.size, (255, 255, 255, 255))
    canvas.alpha_composite(img)
    rgb = canvas.convert("RGB")
    if rgb.size != (SIZE, SIZE):
        rgb = rgb.resize((SIZE, SIZE), Image.LANCZOS)
    return np.asarray(rgb, dtype=np.uint8)


def render_svg(svg: bytes, px: int = 4 * SIZE) -> Image.Image:
    """Rasterise at 4x and let LANCZOS downsample, for clean anti-aliasing."""
    import cairosvg

    png = cairosvg.svg2png(bytestring=svg, output_width=px, output_height=px)
    return Image.open(io.BytesIO(png))


def clean_caption(text: str) -> str:
    text = text.lower().replace(":", "").replace("_", " ")
    return re.sub(r"\s+", " ", text).strip()


def hex_key(codepoints: str) -> str:
    """Normalise a codepoint sequence ("1f600-fe0f") for lookups across sources."""
    return "-".join(p for p in codepoints.upper().split("-") if p != "FE0F")


def load_cldr_names(openmoji: Tarball) -> dict[str, str]:
    """codepoints -> CLDR annotation; gives the same caption across all sets."""
    return {hex_key(e["hexcode"]): clean_caption(e["annotation"]) for e in openmoji.json("data/openmoji.json")}


def datasource_items(tb: Tarball, img_set: str, cldr: dict[str, str]):
    for e in tb.json("emoji.json"):
        base = cldr.get(hex_key(e["unified"]), clean_caption(e["name"] or e["short_name"]))
        variants = [(e["image"], base)]
        for tone, v in (e.get("skin_variations") or {}).items():
            tones = ", ".join(SKIN_TONES[t] for t in tone.split("-") if t in SKIN_TONES)
            variants.append((v["image"], cldr.get(hex_key(v["unified"]), f"{base} {tones}")))
        for image, caption in variants:
            name = f"img/{img_set}/64/{image}"
            if tb.has(name):
                yield caption, lambda n=name: Image.open(io.BytesIO(tb.read(n)))


def openmoji_items(tb: Tarball, _cldr):
    svgs = {Path(n).stem: n for n in tb.names() if n.startswith("src/") and n.endswith(".svg")}
    for e in tb.json("data/openmoji.json"):
        name = svgs.get(e["hexcode"])
        if name:
            caption = e["annotation"]
            if e["group"] == "extras-openmoji":  # OpenMoji's own icons use kebab-case names
                caption = caption.replace("-", " ")
            yield clean_caption(caption), lambda n=name: render_svg(strip_guides(tb.read(n)))


def strip_guides(svg: bytes) -> bytes:
    """OpenMoji sources carry a grey design-grid layer that is not part of the emoji."""
    ET.register_namespace("", SVG_NS)
    root = ET.fromstring(svg)
    for parent in root.iter():
        for child in [c for c in parent if c.get("id") == "grid"]:
            parent.remove(child)
    return ET.tostring(root)


def name_key(text: str) -> str:
    """Caption as bare words, to match iconify's kebab-case names ("a-button-blood-type")."""
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def iconify_items(tb: Tarball, cldr: dict[str, str]):
    """An iconify emoji set: codepoints from chars.json where the set has it, else its icon names
    matched to CLDR names (icons whose name is not an emoji's CLDR name are skipped)."""
    data = tb.json("icons.json")
    chars = tb.json("chars.json") if tb.has("chars.json") else {}
    codepoints = {name: hex_key(c) for c, name in chars.items()} or None
    by_name = {name_key(c): c for c in cldr.values()}
    w, h = data.get("width", 16), data.get("height", 16)

    def svg(icon: dict, flip: bool) -> bytes:
        iw, ih = icon.get("width", w), icon.get("height", h)
        body = icon["body"]
        if flip:
            body = f'<g transform="translate({iw} 0) scale(-1 1)">{body}</g>'
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="{icon.get("left", 0)} '
            f'{icon.get("top", 0)} {iw} {ih}">{body}</svg>'
        ).encode()

    def caption(key: str) -> str | None:
        if codepoints is None:
            return by_name.get(name_key(key))
        if codepoints.get(key) in cldr:
            return cldr[codepoints[key]]
        for tone in sorted(SKIN_TONES.values(), key=len, reverse=True):
            suffix = "-" + tone.replace(" skin tone", "")
            if key.endswith(suffix):
                return clean_caption(key[: -len(suffix)].replace("-", " ") + " " + tone)
        return clean_caption(key.replace("-", " "))

    icons = [(key, icon, False) for key, icon in data["icons"].items()]
    icons += [
        (key, data["icons"][a["parent"]], True)
        for key, a in data.get("aliases", {}).items()
        if a.get("hFlip") and a["parent"] in data["icons"]
    ]
    for key, icon, flip in icons:
        if (c := caption(key)) is not None:
            yield c, lambda i=icon, f=flip: render_svg(svg(i, f))


def split_group(caption: str) -> str:
    """Held-out unit: the emoji name without its skin tones."""
    return re.sub(r"\s+", " ", _TONE_RE.sub("", caption).replace(",", "")).strip()


def is_test(caption: str) -> bool:
    digest = hashlib.sha1(split_group(caption).encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32 < TEST_FRACTION


def keyword_table(emojibase: Tarball) -> dict[str, dict]:
    """Emoji name (skin tones removed) -> its keywords, group and subgroup, as lowercase words."""
    messages = emojibase.json("en/messages.json")
    groups = {g["order"]: g["key"].replace("-", " ") for g in messages["groups"]}
    subgroups = {g["order"]: g["key"].replace("-", " ") for g in messages["subgroups"]}
    table = {}
    for e in emojibase.json("en/data.json"):
        if "group" in e:
            table[split_group(clean_caption(e["label"]))] = {
                "tags": sorted({clean_caption(t) for t in e.get("tags", [])}),
                "group": groups[e["group"]],
                "subgroup": subgroups.get(e.get("subgroup"), ""),
            }
    return table


def write_keywords(out: Path, captions: list[str]) -> None:
    """data/keywords.json: one entry per image (empty where emojibase does not know the name)."""
    table = keyword_table(Tarball(npm_pack(KEYWORDS["npm"], out / "raw")))
    empty = {"tags": [], "group": "", "subgroup": ""}
    rows = [table.get(split_group(c), empty) for c in captions]
    (out / "keywords.json").write_text(json.dumps(rows, ensure_ascii=False))
    print(f"keywords for {sum(r is not empty for r in rows)} of {len(rows)} images")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "data")
    ap.add_argument("--sources", nargs="+", default=list(SOURCES), choices=list(SOURCES))
    args = ap.parse_args()

    tarballs = {s: Tarball(npm_pack(SOURCES[s]["npm"], args.out / "raw")) for s in SOURCES}
    cldr = load_cldr_names(tarballs["openmoji"])
    readers = {
        "noto": lambda tb, c: datasource_items(tb, "google", c),
        "twemoji": lambda tb, c: datasource_items(tb, "twitter", c),
        "openmoji": openmoji_items,
        "fluent": iconify_items,
        "noto-v1": iconify_items,
        "emojione": iconify_items,
        "emojione-v1": iconify_items,
    }

    images, captions, sources = [], [], []
    for src in args.sources:
        n0, skipped = len(images), 0
        for caption, load in readers[src](tarballs[src], cldr):
            try:
                images.append(to_rgb64(load()))
            except Exception:  # a few SVGs use features the rasteriser cannot draw
                skipped += 1
                continue
            captions.append(caption)
            sources.append(src)
        print(f"{src}: {len(images) - n0} images ({skipped} skipped: unreadable)")

    test = [i for i, c in enumerate(captions) if is_test(c)]
    test_set = set(test)
    split = {
        "train": [i for i in range(len(captions)) if i not in test_set],
        "test": test,
        "rule": f"sha1(caption without skin tones) < {TEST_FRACTION}: whole emoji names held out across all sets",
    }
    args.out.mkdir(parents=True, exist_ok=True)
    np.save(args.out / "images.npy", np.stack(images))
    (args.out / "captions.json").write_text(json.dumps(captions, ensure_ascii=False))
    (args.out / "sources.json").write_text(json.dumps(sources))
    (args.out / "split.json").write_text(json.dumps(split))
    (args.out / "licences.json").write_text(
        json.dumps({**{s: SOURCES[s] for s in args.sources}, "keywords": KEYWORDS}, indent=2)
    )
    write_keywords(args.out, captions)
    print(f"total {len(images)} images; train {len(split['train'])}, test {len(test)}")


if __name__ == "__main__":
    main()
