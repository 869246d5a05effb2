"""A prompt read as one of the names a model was trained to draw.

A small model draws a few hundred names well and the rest of the language not at all, so a model
folder with a ``names.json`` (written by ``training/vocabulary.py``) conditions on the known name
that best fits the prompt: "a red cat" draws ``cat``, "apple" ``red apple``, "happy face" the first
face whose keywords hold "happy". The fit, in order: the share of a name's (or alias's) words the
prompt holds, then how many, then the earliest place in the prompt it starts (the head of "a red fox
in snow" is the fox), then the name's priority in the file. A prompt that holds no name's word
falls back to the names' keywords; one that holds none of those either is read as it is, and its
note names the closest known names.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

from ..core.errors import WeightsError

# Words that carry no name: "a cat", "sun with face" and "sun" differ only in these.
STOPWORDS = frozenset({"a", "an", "the", "of", "with", "and", "in", "on", "at", "some", "my", "to"})


class KnownNames:
    """The names of a ``names.json``, their aliases and keywords, and the prompt -> name fit."""

    def __init__(self, names: list[str], aliases: dict[str, str], keywords: dict[str, list[str]], words):
        self.names, self.aliases, self.keywords = list(names), dict(aliases), keywords
        self.words = words  # text -> its words (the caption reader's own split)
        self.phrases = [(n, n) for n in self.names] + [(a, n) for a, n in self.aliases.items()]
        self.priority = {n: i for i, n in enumerate(self.names)}

    @classmethod
    def load(cls, path: Path, words) -> KnownNames:
        """A names.json: ``{"names": [...], "aliases": {alias: name}, "keywords": {name: [...]}}``."""
        try:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
            names, aliases, keywords = raw["names"], raw.get("aliases", {}), raw.get("keywords", {})
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise WeightsError(f"{path} is not a names.json of a training export ({e})") from None
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise WeightsError(f'{path} must hold {{"names": [name, ...]}} (a non-empty list of strings)')
        if unknown := sorted(set(aliases.values()) - set(names)):
            raise WeightsError(f"{path}: aliases name unknown names {unknown[:3]}")
        return cls(names, aliases, keywords, words)

    def content(self, text: str) -> list[str]:
        return [w for w in self.words(text) if w not in STOPWORDS]

    def fit(self, text: str) -> str | None:
        """The known name that fits ``text`` best, or None when it holds no name's or keyword's word."""
        said = self.content(text)
        place = {w: i for i, w in reversed(list(enumerate(said)))}
        best, best_key = None, None
        for phrase, name in self.phrases:
            own = self.content(phrase)
            matched = [w for w in own if w in place]
            if not matched:
                continue
            key = (len(matched) / len(own), len(matched), -min(place[w] for w in matched), -self.priority[name])
            if best_key is None or key > best_key:
                best, best_key = name, key
        if best is not None:
            return best
        hits = {n: sum(w in place for w in self.keywords.get(n, ())) for n in self.names}
        top = max(hits.values(), default=0)
        return next((n for n in self.names if hits[n] == top), None) if top else None

    def note(self, text: str) -> str | None:
        """What the model draws for ``text`` when that is not ``text`` itself, or None."""
        said = self.content(text)
        name = self.fit(text)
        if name is None:
            close = self.closest(text)
            return f"knows none of its words, so it draws no known name (closest known: {', '.join(close)})"
        if said == self.content(name):
            return None
        used = set(self.content(name)) | {w for a, n in self.aliases.items() if n == name for w in self.content(a)}
        unused = [w for w in dict.fromkeys(said) if w not in used and w not in self.keywords.get(name, ())]
        return f"draws it as its known name {name!r}" + (
            f" (not reading {', '.join(map(repr, unused[:5]))})" if unused else ""
        )

    def closest(self, text: str, n: int = 3) -> list[str]:
        """The known names spelled most like ``text`` (typos, plurals), best first."""
        spelled = " ".join(self.content(text)) or text.lower()
        found = difflib.get_close_matches(spelled, [p for p, _ in self.phrases], n=n * 2, cutoff=0.0)
        return list(dict.fromkeys(dict(self.phrases)[p] for p in found))[:n]
