"""Methods: registered parts joined by ``+`` (``scd-mc+pac+vp``), and presets, named method strings
(docs/DESIGN.md §4.6).

A method string names at most one part of each kind (any number of wrappers); a drafter left out
is ``sjd``, a verifier ``mrs``, a tree none and the layout the 1-D chain. Options are the union of
the parts' options, with the papers' defaults, overridden by keyword (API) or ``-o key=value``
(CLI). ``scd-mc`` coupling and SJD-PAC's adaptive continuation are the same operation (keep a tail
draft with probability min(1, p/q), else draw from the residual), so ``sjd-pac`` is ``scd-mc+pac``;
in ``scd-gs+pac`` Gumbel sharing plays that role.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass

from .. import parts as _parts
from ..core.checks import parse_options
from ..core.errors import ConfigError
from ..core.registry import KINDS, PARTS, Part
from . import pjd  # noqa: F401  (registers PJD's schedule part)
from .jacobi import Parts

# Parts register on import: every module of jacobigen.parts is imported, so a new part is one new
# file there (plus its test), with no edit here.
for _module in pkgutil.iter_modules(_parts.__path__):
    importlib.import_module(f"{_parts.__name__}.{_module.name}")

LEFT_OUT = {"drafter": "sjd", "verifier": "mrs"}  # the part of a kind a method string leaves out
INVARIANT = "invariant"  # the verifier that commits ar's own tokens (parts.verifiers.SameAsAr)


def by_kind() -> list[str]:
    """Part names, drafters first (KINDS order), as listings show them."""
    return [p.name for p in sorted(PARTS.values(), key=lambda p: KINDS.index(p.kind))]


def parse(text: str) -> tuple[Part, ...]:
    """The parts ``a+b+c`` names, in build order (wrappers in the order written)."""
    names = text.split("+")
    unknown = [n for n in names if n not in PARTS]
    if unknown:
        raise ConfigError(
            f"unknown method {text!r}: {', '.join(map(repr, unknown))} is neither a preset nor a "
            f"part; presets: {', '.join(METHODS)}; parts (join with +): {', '.join(by_kind())}"
        )
    if len(set(names)) < len(names):
        raise ConfigError(f"method {text!r} names a part twice")
    parts = []
    for kind in KINDS:
        chosen = [PARTS[n] for n in names if PARTS[n].kind == kind] or (
            [PARTS[LEFT_OUT[kind]]] if kind in LEFT_OUT else []
        )
        if len(chosen) > 1 and kind != "wrapper":
            raise ConfigError(
                f"method {text!r} names {len(chosen)} {kind}s ({', '.join(p.name for p in chosen)}): a method has one"
            )
        parts += chosen
    return tuple(parts)


@dataclass(frozen=True)
class Method:
    name: str
    description: str
    parts: tuple[Part, ...]
    window: int | None = None  # fixed window (ar), else the caller's

    @property
    def lossless(self) -> bool:
        return all(p.lossless for p in self.parts)

    @property
    def options(self) -> dict:
        own = {k: v for p in self.parts for k, v in p.options.items()}
        return own | {k: v for p in self.parts for k, v in p.defaults.items() if k in own}

    @property
    def parts_text(self) -> str:
        """The method's one spelling (:func:`canonical`): what the stats line prints."""
        return canonical(self.parts)

    @property
    def same_as_ar(self) -> bool:
        """Whether the seed's tokens are ``ar``'s: ``ar`` itself, or verified by the invariant verifier."""
        verifier = self.part("verifier")
        return self.window == 1 or (verifier is not None and verifier.name == INVARIANT)

    def part(self, kind: str) -> Part | None:
        return next((p for p in self.parts if p.kind == kind), None)

    def build(self, window: int, **overrides) -> Parts:
        unknown = set(overrides) - set(self.options)
        if unknown:
            known = ", ".join(sorted(self.options)) or "none"
            raise ConfigError(
                f"method {self.name!r} has no option(s) {', '.join(sorted(unknown))} (its options: {known})"
            )
        o = {**self.options, **overrides}
        made: dict = {}
        for p in self.parts:
            if p.kind == "wrapper":
                made["drafter"] = p.make(o, made["drafter"])
            else:
                made[p.kind] = p.make(o)
        if "tree" in made and "schedule" not in made:
            made["tree"].carve(self.window or window)  # a tree that cannot fit the window fails here
        return Parts(made["drafter"], made["verifier"], self.window or window, made.get("tree"), made.get("schedule"))


SPELLING = ("schedule", "drafter", "tree", "verifier", "wrapper")  # pjd+scd-mc+pac, lantern+vp


def canonical(parts: tuple[Part, ...]) -> str:
    """The one spelling of a set of parts, whatever order they were written in: schedule, drafter
    (always, so the stats say which ran), tree, verifier (unless the default mrs), then the
    wrappers in the order written (each wraps the drafter so far)."""
    names = [p.name for kind in SPELLING for p in parts if p.kind == kind and p.name != LEFT_OUT.get("verifier")]
    return "+".join(names)


def describe(parts: tuple[Part, ...]) -> str:
    return "; ".join(p.description for p in parts if p.name not in LEFT_OUT.values())


def preset(name: str, description: str | None = None, parts: str | None = None, window: int | None = None) -> Method:
    """A named method string (``parts``, by default the name itself), described by its parts unless
    told otherwise."""
    chosen = parse(parts or name)
    return Method(name, description or describe(chosen), chosen, window)


METHODS: dict[str, Method] = {
    m.name: m
    for m in [
        preset("ar", "plain autoregressive sampling, one token per forward", parts="sjd", window=1),
        preset("sjd", "Speculative Jacobi Decoding: independent drafts, stop at first rejection"),
        preset("scd-mc"),
        preset("scd-gs"),
        preset("sjd-pac", "SJD-PAC: adaptive continuation + proactive tree at the rejection point", parts="scd-mc+pac"),
        preset("sjd-vp", "SJD-VP: drafts from p fused with each position's probability trajectory", parts="sjd+vp"),
        preset("scd-mc+pac", "maximal coupling with the proactive tree (equals sjd-pac)"),
        preset("scd-gs+pac", "Gumbel sharing with the proactive tree"),
        preset("scd-mc+vp", "maximal coupling from the verification-prior fused p'"),
        preset(
            "scd-mc+pac+vp",
            "coupling, proactive tree and verification prior together (= SJD-PAC drafting from the fused p')",
        ),
        preset("pjd", "PJD: rows decoded in parallel once the row above has c tokens, row-causal mask (lossy)"),
        preset("pjd+scd-mc", "PJD rows with maximal-coupling drafts (lossy)"),
        preset("pjd+scd-mc+pac", "PJD rows, maximal coupling, proactive tree at each row's head (lossy)"),
        preset("pjd+scd-mc+vp", "PJD rows with maximal coupling from the verification-prior fused p' (lossy)"),
        preset("gsd", "GSD: accept by the mass of the draft's latent-neighbour group (lossy)"),
        preset("lantern", "LANTERN: draft borrows up to delta from its latent neighbours (lossy)"),
        preset("lantern+vp", "LANTERN acceptance with verification-prior drafting (lossy)"),
    ]
}
# presets by spelling (the first of two with the same parts: sjd-pac, not scd-mc+pac); ar's window is its own
_BY_PARTS = {m.parts_text: m for m in reversed(METHODS.values()) if m.window is None}


def get_method(name: str) -> Method:
    """A preset, or the method a string of parts names, in any order: the preset with those parts
    (``vp+pac+scd-mc`` is ``scd-mc+pac+vp``), else a method named by its one spelling."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"method must be a preset or parts joined by +, got {name!r}; presets: {', '.join(METHODS)}")
    if name in METHODS:
        return METHODS[name]
    parts = parse(name)
    spelling = canonical(parts)
    return _BY_PARTS.get(spelling) or Method(spelling, describe(parts), parts)


def same_as_ar(method: Method) -> Method:
    """``method`` with the invariant verifier (docs/DESIGN.md §10): the same seed then commits exactly
    ``ar``'s tokens. ``ar`` is itself; a lossy method, or one that names another verifier, has no
    such variant."""
    if method.window == 1:
        return method
    verifier = method.part("verifier")
    if not method.lossless or verifier is None or verifier.name not in (LEFT_OUT["verifier"], INVARIANT):
        raise ConfigError(
            f"same_as_ar needs a lossless method verified by rejection sampling; {method.name!r} is "
            f"{'lossy' if not method.lossless else 'verified by ' + repr(verifier and verifier.name)}: its tokens "
            "are not ar's"
        )
    return get_method("+".join([*(p.name for p in method.parts if p.kind != "verifier"), INVARIANT]))


@dataclass(frozen=True)
class Variant:
    """A method with options, named ``name[key=value,...]`` (e.g. ``sjd-pac[tree_budget=full]``) so
    that one bench compares settings of the same method side by side. A ``window`` option pins the
    window of that entry."""

    label: str
    method: Method
    options: dict
    window: int | None  # pinned window (the option, or the method's own, e.g. ar's 1)

    def build(self, window: int) -> Parts:
        return self.method.build(self.window or window, **self.options)


def parse_variant(text: str) -> Variant:
    m = re.fullmatch(r"\s*([^\[\]\s]+)\s*(?:\[(.*)\])?\s*", text)
    if not m:
        raise ConfigError(f"expected METHOD or METHOD[key=value,...], got {text!r}")
    options = parse_options(filter(None, (m.group(2) or "").split(",")))
    method = get_method(m.group(1))
    window = options.pop("window", None)
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise ConfigError(f"window must be an integer >= 1 in {text!r}")
    method.build(window or method.window or 1024, **options)  # unknown or bad options fail here
    return Variant(text.strip(), method, options, window or method.window)


def split_variants(text: str) -> list[str]:
    """Comma-separated variants; commas inside ``[...]`` belong to the variant."""
    return [v.strip() for v in re.findall(r"(?:[^,\[]|\[[^\]]*\])+", text) if v.strip()]
