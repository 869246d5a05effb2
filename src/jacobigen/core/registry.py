"""Parts by name: what a method string such as ``scd-mc+pac+vp`` is made of (docs/DESIGN.md §4.6).

A part's class is its own config: its dataclass fields with defaults are its options (the papers'
values), each offered to users as ``prefix + field``, and the class checks them itself, raising
``ConfigError``. A class joins with :func:`register` where it is defined, so a new part needs no
edit in this module nor in ``methods``. Torch-free.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields, is_dataclass

from .errors import ConfigError

# In build order: a wrapper wraps the drafter built before it; a method has at most one part of
# every other kind.
KINDS = ("drafter", "wrapper", "tree", "verifier", "schedule")
RESERVED = {"window"}  # pinned per entry by ``name[window=N]``, never a part's option


@dataclass(frozen=True)
class Part:
    name: str
    kind: str
    cls: type
    description: str
    prefix: str = ""
    defaults: dict = field(default_factory=dict)  # other parts' option defaults when combined with this one

    @property
    def lossless(self) -> bool:
        """Unless its class says ``lossless = False``."""
        return getattr(self.cls, "lossless", True)

    def _fields(self):
        return [f for f in fields(self.cls) if f.default is not MISSING] if is_dataclass(self.cls) else []

    @property
    def options(self) -> dict:
        return {self.prefix + f.name: f.default for f in self._fields()}

    def make(self, options: dict, *base):
        """The part from (validated) ``options``; a wrapper gets the drafter it wraps as ``base``."""
        return self.cls(*base, **{f.name: options[self.prefix + f.name] for f in self._fields()})


PARTS: dict[str, Part] = {}


def register(name: str, kind: str, description: str, prefix: str = "", defaults: dict | None = None):
    """Class decorator: offer the class as part ``name`` of method strings. Parts that can meet in
    one method never share an option name, so that ``-o key=value`` names one part (two drafters
    may: a method has one drafter)."""

    def add(cls: type) -> type:
        part = Part(name, kind, cls, description, prefix, dict(defaults or {}))
        if kind not in KINDS:
            raise ConfigError(f"part {name!r}: kind {kind!r} is not one of {', '.join(KINDS)}")
        if name in PARTS or "+" in name or "[" in name:
            raise ConfigError(f"part name {name!r} is taken or holds '+' or '['")
        taken = {k for p in PARTS.values() if p.kind != kind or kind == "wrapper" for k in p.options}
        clash = sorted((RESERVED | taken) & part.options.keys())
        if clash:
            raise ConfigError(f"part {name!r}: option(s) {', '.join(clash)} taken (by another part, or reserved)")
        PARTS[name] = part
        return cls

    return add
