"""Named methods: presets that pick a drafter, a verifier, a tree, a layout and a window (docs/DESIGN.md
§4.6).

A preset is a recipe of parts; every hyper-parameter has the paper's default and can be overridden
by keyword (API) or ``-o key=value`` (CLI). ``scd-mc`` coupling and SJD-PAC's adaptive
continuation are the same operation (keep a tail draft with probability min(1, p/q), else draw from
the residual), so ``sjd-pac`` and ``scd-mc+pac`` coincide; in ``scd-gs+pac`` Gumbel sharing plays
that role.

``pjd`` swaps the 1-D window for PJD's row-parallel layout (the window is then per row). The paper
uses c = 16 context tokens of C = 48 columns on Lumina-mGPT (coverage 1/3; 0.25 in its resolution
study); our grids are 16 wide, where c/C = 1/2 (c = 8) is the default. ``pjd_context`` sets c
directly and wins over ``pjd_ratio``; ``pjd_rows`` caps the rows in flight (default ceil(C/c) + 1).
PJD is lossy for c < C; with c = C it is exact SJD with windows cut at row ends, but the presets
are labelled lossy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .checks import parse_options
from .drafters import Coupled, GumbelShared, Independent, VerificationPrior
from .errors import ConfigError
from .jacobi import Parts
from .pjd import RowParallel
from .relaxed import GroupVerifier, LanternVerifier
from .tree import ProactiveTree
from .verifiers import Verifier

DRAFTERS = {"independent": Independent, "mc": Coupled, "gs": GumbelShared}
VP_DEFAULTS = {"vp_history": 4, "vp_growth_steps": 3, "vp_top_k": 50, "vp_weight": 1.0, "vp_decay": 0.5}
TREE_DEFAULTS = {"tree_depth": 3, "tree_width": 4, "tree_budget": "auto", "tree_min_gain": None}
PJD_TREE_BUDGET = 3    # PJD's rows have no window to carve from: a few siblings, added to each row
PJD_DEFAULTS = {"pjd_context": None, "pjd_ratio": 0.5, "pjd_rows": None}
COUPLING_DEFAULTS = {"alpha": 1.0}    # SCD's coupling strength (0: independent drafts, 1: full coupling)


@dataclass(frozen=True)
class Method:
    name: str
    description: str
    drafter: str = "independent"
    vp: bool = False
    tree: bool = False
    verifier: type = Verifier
    window: int | None = None            # fixed window (ar), else the caller's
    extra: dict = field(default_factory=dict)
    layout2d: bool = False               # PJD's row-parallel layout (lossy for c < C)

    @property
    def lossless(self) -> bool:
        return self.verifier.lossless and not self.layout2d

    @property
    def options(self) -> dict:
        tree = {**TREE_DEFAULTS, **({"tree_budget": PJD_TREE_BUDGET} if self.layout2d else {})}
        coupled = self.drafter in ("mc", "gs")
        return {**(COUPLING_DEFAULTS if coupled else {}), **(VP_DEFAULTS if self.vp else {}),
                **(tree if self.tree else {}),
                **(PJD_DEFAULTS if self.layout2d else {}), **self.extra}

    def build(self, window: int, **overrides) -> Parts:
        unknown = set(overrides) - set(self.options)
        if unknown:
            known = ", ".join(sorted(self.options)) or "none"
            raise ConfigError(f"method {self.name!r} has no option(s) {', '.join(sorted(unknown))} "
                              f"(its options: {known})")
        o = {**self.options, **overrides}
        drafter = DRAFTERS[self.drafter](o["alpha"]) if "alpha" in o else DRAFTERS[self.drafter]()
        if self.vp:
            drafter = VerificationPrior(drafter, o["vp_history"], o["vp_growth_steps"], o["vp_top_k"],
                                        o["vp_weight"], o["vp_decay"])
        tree = ProactiveTree(o["tree_depth"], o["tree_width"], o["tree_budget"], o["tree_min_gain"]) if self.tree \
            else None
        if tree and not self.layout2d:
            tree.carve(self.window or window)         # a tree that cannot fit the window fails here
        verifier = self.verifier(**{k: o[k] for k in self.extra})
        layout2d = RowParallel(o["pjd_context"], o["pjd_ratio"], o["pjd_rows"]) if self.layout2d else None
        return Parts(drafter, verifier, self.window or window, tree, layout2d)


METHODS: dict[str, Method] = {m.name: m for m in [
    Method("ar", "plain autoregressive sampling, one token per forward", window=1),
    Method("sjd", "Speculative Jacobi Decoding: independent drafts, stop at first rejection"),
    Method("scd-mc", "SCD maximal coupling: tail drafts kept with prob min(1, p/q)", drafter="mc"),
    Method("scd-gs", "SCD Gumbel sharing: drafts argmax(log p + g), g fixed per position", drafter="gs"),
    Method("sjd-pac", "SJD-PAC: adaptive continuation + proactive tree at the rejection point",
           drafter="mc", tree=True),
    Method("sjd-vp", "SJD-VP: drafts from p fused with each position's probability trajectory", vp=True),
    Method("scd-mc+pac", "maximal coupling with the proactive tree (equals sjd-pac)", drafter="mc", tree=True),
    Method("scd-gs+pac", "Gumbel sharing with the proactive tree", drafter="gs", tree=True),
    Method("scd-mc+vp", "maximal coupling from the verification-prior fused p'", drafter="mc", vp=True),
    Method("scd-mc+pac+vp", "coupling, proactive tree and verification prior together (= SJD-PAC drafting "
           "from the fused p')", drafter="mc", tree=True, vp=True),
    Method("pjd", "PJD: rows decoded in parallel once the row above has c tokens, row-causal mask (lossy)",
           layout2d=True),
    Method("pjd+scd-mc", "PJD rows with maximal-coupling drafts (lossy)", drafter="mc", layout2d=True),
    Method("pjd+scd-mc+pac", "PJD rows, maximal coupling, proactive tree at each row's head (lossy)", drafter="mc",
           tree=True, layout2d=True),
    Method("pjd+scd-mc+vp", "PJD rows with maximal coupling from the verification-prior fused p' (lossy)",
           drafter="mc", vp=True, layout2d=True),
    Method("gsd", "GSD: accept by the mass of the draft's latent-neighbour group (lossy)",
           verifier=GroupVerifier, extra={"gsd_k": 4}),
    Method("lantern", "LANTERN: draft borrows up to delta from its latent neighbours (lossy)",
           verifier=LanternVerifier, extra={"lantern_k": 8, "lantern_delta": 0.1}),
    Method("lantern+vp", "LANTERN acceptance with verification-prior drafting (lossy)", vp=True,
           verifier=LanternVerifier, extra={"lantern_k": 8, "lantern_delta": 0.1}),
]}


ALIASES = {"pac+vp": "scd-mc+pac+vp"}   # the same parts under the name SJD-PAC + SJD-VP would suggest


def get_method(name: str) -> Method:
    try:
        return METHODS[ALIASES.get(name, name)]
    except KeyError:
        raise ConfigError(f"unknown method {name!r}; available: {', '.join(METHODS)}") from None


@dataclass(frozen=True)
class Variant:
    """A method with options, named ``name[key=value,...]`` (e.g. ``sjd-pac[tree_budget=full]``) so
    that one bench compares settings of the same method side by side. A ``window`` option pins the
    window of that entry."""

    label: str
    method: Method
    options: dict
    window: int | None          # pinned window (the option, or the method's own, e.g. ar's 1)

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
    method.build(window or method.window or 1024, **options)         # unknown or bad options fail here
    return Variant(text.strip(), method, options, window or method.window)


def split_variants(text: str) -> list[str]:
    """Comma-separated variants; commas inside ``[...]`` belong to the variant."""
    return [v.strip() for v in re.findall(r"(?:[^,\[]|\[[^\]]*\])+", text) if v.strip()]
