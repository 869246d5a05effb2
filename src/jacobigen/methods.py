"""Named methods: presets that pick a drafter, a verifier and a window (DESIGN.md section 4)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .drafters import Independent
from .errors import ConfigError
from .verifiers import FirstRejection


@dataclass(frozen=True)
class Method:
    name: str
    description: str
    lossless: bool
    drafter: Callable[..., object]
    verifier: Callable[..., object]
    window: int | None = None          # fixed window (ar), else the caller's
    options: dict = field(default_factory=dict)

    def build(self, **overrides):
        unknown = set(overrides) - set(self.options)
        if unknown:
            known = ", ".join(sorted(self.options)) or "none"
            raise ConfigError(f"method {self.name!r} has no option(s) {', '.join(sorted(unknown))} "
                              f"(its options: {known})")
        opts = {**self.options, **overrides}
        return self.drafter(**opts), self.verifier(**opts)


def _parts(cls):
    return lambda **_: cls()


METHODS: dict[str, Method] = {
    m.name: m for m in [
        Method("ar", "plain autoregressive sampling, one token per forward", True,
               _parts(Independent), _parts(FirstRejection), window=1),
        Method("sjd", "Speculative Jacobi Decoding: independent drafts, stop at first rejection", True,
               _parts(Independent), _parts(FirstRejection)),
    ]
}


def get_method(name: str) -> Method:
    try:
        return METHODS[name]
    except KeyError:
        raise ConfigError(f"unknown method {name!r}; available: {', '.join(METHODS)}") from None
