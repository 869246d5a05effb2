"""The curated vocabulary of the embedded image model: the names people try first (issue 60).

A 9M model on a 2-core machine cannot fit ~3,400 emoji names well enough to draw each one (model
card); it can fit a few hundred with many passes each. ``NAMES`` lists them by group, each a CLDR name
as ``data/captions.json`` spells it (skin tones removed), in priority order: where a prompt fits two
names equally ("apple": red apple or green apple), the one listed first wins. ``ALIASES`` maps the
natural variants the README, docs and tests use onto them. ``names_file`` writes what the package
reads beside the weights (``names.json``: :class:`jacobigen.models.names.KnownNames`), with each
name's keywords from the shipped keyword data, so a user's "happy face" or "kitty" finds its name.

    python training/vocabulary.py                 # checks every name against data/captions.json
    python training/vocabulary.py --write DIR     # and writes DIR/names.json
"""

from __future__ import annotations

import json
from pathlib import Path

NAMES: dict[str, list[str]] = {
    "faces": [
        "grinning face",
        "grinning face with big eyes",
        "grinning face with smiling eyes",
        "beaming face with smiling eyes",
        "face with tears of joy",
        "slightly smiling face",
        "winking face",
        "smiling face with smiling eyes",
        "smiling face with hearts",
        "smiling face with heart-eyes",
        "face blowing a kiss",
        "face with tongue",
        "zany face",
        "thinking face",
        "neutral face",
        "smirking face",
        "unamused face",
        "face with rolling eyes",
        "pensive face",
        "sleeping face",
        "face with medical mask",
        "face with thermometer",
        "hot face",
        "cold face",
        "exploding head",
        "partying face",
        "smiling face with sunglasses",
        "nerd face",
        "worried face",
        "frowning face",
        "pleading face",
        "crying face",
        "loudly crying face",
        "face screaming in fear",
        "weary face",
        "yawning face",
        "angry face",
        "smiling face with horns",
        "skull",
        "pile of poo",
        "clown face",
        "ghost",
        "alien",
        "robot",
        "grinning cat",
    ],
    "hands": [
        "waving hand",
        "raised hand",
        "ok hand",
        "victory hand",
        "crossed fingers",
        "thumbs up",
        "thumbs down",
        "raised fist",
        "clapping hands",
        "raising hands",
        "folded hands",
        "handshake",
        "flexed biceps",
        "index pointing up",
        "backhand index pointing right",
        "love-you gesture",
        "eyes",
    ],
    "hearts and symbols": [
        "red heart",
        "orange heart",
        "yellow heart",
        "green heart",
        "blue heart",
        "purple heart",
        "black heart",
        "white heart",
        "brown heart",
        "broken heart",
        "two hearts",
        "sparkling heart",
        "heart with arrow",
        "hundred points",
        "collision",
        "sparkles",
        "star",
        "glowing star",
        "fire",
        "check mark button",
        "cross mark",
        "red exclamation mark",
        "warning",
        "no entry",
        "recycling symbol",
        "peace symbol",
        "yin yang",
        "musical notes",
        "speech balloon",
        "zzz",
        "light bulb",
    ],
    "animals": [
        "cat face",
        "cat",
        "dog face",
        "dog",
        "rabbit face",
        "fox",
        "bear",
        "panda",
        "tiger face",
        "lion",
        "cow face",
        "pig face",
        "frog",
        "monkey face",
        "chicken",
        "penguin",
        "bird",
        "baby chick",
        "duck",
        "owl",
        "horse face",
        "unicorn",
        "honeybee",
        "butterfly",
        "snail",
        "turtle",
        "snake",
        "octopus",
        "tropical fish",
        "fish",
        "dolphin",
        "spouting whale",
        "shark",
        "crab",
        "elephant",
        "giraffe",
        "zebra",
    ],
    "food and fruit": [
        "red apple",
        "green apple",
        "pear",
        "lemon",
        "banana",
        "watermelon",
        "grapes",
        "strawberry",
        "cherries",
        "peach",
        "pineapple",
        "avocado",
        "tomato",
        "eggplant",
        "carrot",
        "ear of corn",
        "hot pepper",
        "broccoli",
        "mushroom",
        "bread",
        "cheese wedge",
        "egg",
        "pancakes",
        "hamburger",
        "french fries",
        "pizza",
        "hot dog",
        "taco",
        "spaghetti",
        "sushi",
        "doughnut",
        "cookie",
        "birthday cake",
        "cupcake",
        "chocolate bar",
        "candy",
        "lollipop",
        "ice cream",
        "hot beverage",
        "beer mug",
        "wine glass",
    ],
    "weather and nature": [
        "sun",
        "sun with face",
        "sun behind cloud",
        "cloud",
        "cloud with rain",
        "cloud with lightning",
        "cloud with snow",
        "rainbow",
        "umbrella with rain drops",
        "snowflake",
        "snowman",
        "high voltage",
        "droplet",
        "water wave",
        "crescent moon",
        "full moon",
        "globe showing europe-africa",
        "volcano",
        "snow-capped mountain",
        "tornado",
        "rose",
        "sunflower",
        "tulip",
        "cherry blossom",
        "seedling",
        "evergreen tree",
        "deciduous tree",
        "palm tree",
        "cactus",
        "four leaf clover",
        "maple leaf",
    ],
    "vehicles": [
        "automobile",
        "taxi",
        "bus",
        "police car",
        "ambulance",
        "fire engine",
        "racing car",
        "pickup truck",
        "tractor",
        "motorcycle",
        "bicycle",
        "locomotive",
        "airplane",
        "helicopter",
        "rocket",
        "flying saucer",
        "sailboat",
        "ship",
        "anchor",
    ],
    "objects": [
        "house",
        "house with garden",
        "castle",
        "balloon",
        "party popper",
        "wrapped gift",
        "christmas tree",
        "jack-o-lantern",
        "soccer ball",
        "basketball",
        "baseball",
        "trophy",
        "crown",
        "gem stone",
        "ring",
        "t-shirt",
        "dress",
        "running shoe",
        "graduation cap",
        "mobile phone",
        "laptop",
        "alarm clock",
        "camera",
        "television",
        "key",
        "locked",
        "hammer",
        "scissors",
        "pencil",
        "envelope",
        "bell",
        "guitar",
        "headphone",
        "video game",
        "teddy bear",
        "slot machine",
    ],
}

# Words users type for a name whose CLDR spelling they would not guess; keywords cover the rest.
ALIASES = {
    "apple": "red apple",
    "heart": "red heart",
    "love": "red heart",
    "smiley": "grinning face",
    "smiley face": "grinning face",
    "happy face": "grinning face",
    "smile": "grinning face",
    "laughing face": "face with tears of joy",
    "sad face": "crying face",
    "kitten": "cat face",
    "kitty": "cat face",
    "puppy": "dog face",
    "car": "automobile",
    "plane": "airplane",
    "moon": "crescent moon",
    "tree": "deciduous tree",
    "flower": "tulip",
    "coffee": "hot beverage",
    "poop": "pile of poo",
    "thumbs up sign": "thumbs up",
    "ok": "ok hand",
    "peace": "victory hand",
    "lightning": "high voltage",
    "rain": "cloud with rain",
    "snow": "snowflake",
    "earth": "globe showing europe-africa",
    "world": "globe showing europe-africa",
    "gift": "wrapped gift",
    "present": "wrapped gift",
    "phone": "mobile phone",
    "football": "soccer ball",
}


def all_names() -> list[str]:
    return [n for group in NAMES.values() for n in group]


def names_file(captions: list[str], keywords: list[dict]) -> dict:
    """What the package reads beside the weights (names.json): the names in priority order, their
    groups, the aliases, and each name's keywords (from the first of its images that has any:
    ``captions`` and ``keywords`` are data/captions.json and data/keywords.json)."""
    from fetch_data import split_group

    rows = {}
    for caption, kw in zip(captions, keywords, strict=True):
        if kw.get("tags") and split_group(caption) not in rows:
            rows[split_group(caption)] = kw
    names = all_names()
    return {
        "names": names,
        "groups": {n: g for g, group in NAMES.items() for n in group},
        "aliases": ALIASES,
        "keywords": {n: sorted(set(rows.get(n, {}).get("tags", [])) - {n}) for n in names},
    }


def check(captions: list[str]) -> list[str]:
    """Names that no image's caption (skin tones removed) carries, and aliases onto unknown names."""
    from fetch_data import split_group

    have = {split_group(c) for c in captions}
    names = all_names()
    missing = [n for n in names if n not in have]
    dupes = sorted({n for n in names if names.count(n) > 1})
    bad = [a for a, n in ALIASES.items() if n not in names]
    return [
        *(f"no image: {n}" for n in missing),
        *(f"twice: {n}" for n in dupes),
        *(f"alias onto unknown: {a}" for a in bad),
    ]


def main() -> None:
    import argparse

    from common import DATA

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", type=Path, metavar="DIR", help="also write DIR/names.json (an export's)")
    args = ap.parse_args()
    captions = json.loads((DATA / "captions.json").read_text())
    problems = check(captions)
    print(f"{len(all_names())} names; " + ("\n".join(problems) if problems else "all found"))
    if problems:
        raise SystemExit(1)
    if args.write:
        keywords = json.loads((DATA / "keywords.json").read_text())
        text = json.dumps(names_file(captions, keywords), ensure_ascii=False, indent=1)
        (args.write / "names.json").write_text(text)


if __name__ == "__main__":
    main()
