"""Named methods: presets that pick a drafter, a verifier, a tree, a layout and a window (DESIGN.md
section 4).

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

from dataclasses import dataclass, field

from .drafters import Coupled, GumbelShared, Independent, VerificationPrior
from .errors import ConfigError
from .jacobi import Parts
from .pjd import RowParallel
from .relaxed import GroupVerifier, LanternVerifier
from .tree import ProactiveTree
from .verifiers import Verifier

DRAFTERS = {"independent": Independent, "mc": Coupled, "gs": GumbelShared}
VP_DEFAULTS = {"vp_history": 4, "vp_growth_steps": 3, "vp_top_k": 50, "vp_weight": 1.0, "vp_decay": 0.5}
TREE_DEFAULTS = {"tree_depth": 3, "tree_width": 4}
PJD_DEFAULTS = {"pjd_context": None, "pjd_ratio": 0.5, "pjd_rows": None}


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
        return {**(VP_DEFAULTS if self.vp else {}), **(TREE_DEFAULTS if self.tree else {}),
                **(PJD_DEFAULTS if self.layout2d else {}), **self.extra}

    def build(self, window: int, **overrides) -> Parts:
        unknown = set(overrides) - set(self.options)
        if unknown:
            known = ", ".join(sorted(self.options)) or "none"
            raise ConfigError(f"method {self.name!r} has no option(s) {', '.join(sorted(unknown))} "
                              f"(its options: {known})")
        o = {**self.options, **overrides}
        drafter = DRAFTERS[self.drafter]()
        if self.vp:
            if not 1 <= o["vp_growth_steps"] <= o["vp_history"]:
                raise ConfigError(f"vp_growth_steps must lie in [1, vp_history={o['vp_history']}]")
            drafter = VerificationPrior(drafter, o["vp_history"], o["vp_growth_steps"], o["vp_top_k"],
                                        o["vp_weight"], o["vp_decay"])
        tree = None
        if self.tree:
            if o["tree_depth"] < 1 or o["tree_width"] < 1:
                raise ConfigError("tree_depth and tree_width must be >= 1")
            tree = ProactiveTree(o["tree_depth"], o["tree_width"])
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
    Method("pac+vp", "SJD-PAC drafting from the verification-prior fused p'", drafter="mc", tree=True, vp=True),
    Method("scd-mc+vp", "maximal coupling from the verification-prior fused p'", drafter="mc", vp=True),
    Method("scd-mc+pac+vp", "coupling, proactive tree and verification prior together", drafter="mc",
           tree=True, vp=True),
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


def get_method(name: str) -> Method:
    try:
        return METHODS[name]
    except KeyError:
        raise ConfigError(f"unknown method {name!r}; available: {', '.join(METHODS)}") from None
