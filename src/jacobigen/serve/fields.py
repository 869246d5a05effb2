"""The body of ``POST /v1/images/generations``, checked field by field.

The OpenAI images API's fields (``prompt``, ``n``, ``size``, ``response_format``) plus the decoder's
(``method``, ``window``, ``seed`` and the sampling). Every refusal is a :class:`FieldError` naming
the field and what it allows; the ranges are the library's own (its ``ConfigError`` messages), so the
server refuses exactly what ``jacobigen generate`` refuses.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.checks import SAMPLING_KEYS as SAMPLING
from ..core.checks import image_seeds, integer
from ..core.errors import ConfigError
from ..core.sampling import SamplingConfig
from ..decode.methods import METHODS, get_method
from ..parts.tree import MAX_NODES

MAX_PROMPT_CHARS = 1000
MAX_IMAGES = 8  # ``n`` per request
DEFAULT_WINDOW = 32  # ``jacobigen generate``'s default, for a method given without a window
AUTO = "auto"
FIELDS = ("prompt", "n", "size", "response_format", "method", "window", "seed", "stream", "model", "user", *SAMPLING)


class FieldError(ValueError):
    """A request field is missing, of the wrong type or out of range (HTTP 400)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Group:
    """What one engine decodes: requests share a batch only when all of this is equal."""

    method: str
    window: int
    sampling: SamplingConfig


@dataclass(frozen=True)
class ImageRequest:
    prompt: str
    seeds: list[int]
    sampling: SamplingConfig
    method: str | None  # None: the load policy picks (``method: "auto"``)
    window: int | None  # None: the policy's or the method's default
    stream: bool


def _field(name: str, check, value):
    """``check(value)``, its ConfigError (or TypeError) turned into a FieldError for ``name``."""
    try:
        return check(value)
    except (ConfigError, TypeError) as e:
        raise FieldError(name, str(e)) from e


def parse(body, defaults: dict, size: str, model_name: str, length: int) -> ImageRequest:
    """The request in ``body`` (parsed JSON) for a model whose images are ``size`` ("WxH") and of
    ``length`` tokens; ``defaults``: the model's recommended sampling."""
    if not isinstance(body, dict):
        raise FieldError("body", "the body must be a JSON object")
    _check_text(body)
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise FieldError(unknown[0], f"unknown field {unknown[0]!r}; the fields are {', '.join(FIELDS)}")
    body = {k: v for k, v in body.items() if v is not None}  # null: not set (OpenAI clients send it so)
    prompt = body.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise FieldError("prompt", "prompt must be a non-empty string")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise FieldError("prompt", f"prompt has {len(prompt)} characters; at most {MAX_PROMPT_CHARS}")
    if body.get("model") not in (None, model_name):
        raise FieldError("model", f"model {body['model']!r} is not served here; this server serves {model_name!r}")
    n = _field("n", lambda v: integer("n", v, 1, MAX_IMAGES), body.get("n", 1))
    if body.get("size", size) != size:
        raise FieldError("size", f"size {body['size']!r}: this model makes {size} images only")
    if body.get("response_format", "b64_json") != "b64_json":
        raise FieldError("response_format", f"response_format {body['response_format']!r}: only 'b64_json'")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise FieldError("stream", f"stream must be true or false, got {stream!r}")
    seeds = _field("seed", lambda v: image_seeds(integer("seed", v), n), body.get("seed", 0))
    sampling = {k: body.get(k, defaults.get(k)) for k in SAMPLING}
    given = {k: v for k, v in sampling.items() if v is not None}
    for name, value in given.items():  # each alone, so that a refusal names its field
        _field(name, lambda v, name=name: SamplingConfig(**{name: v}), value)
    config = SamplingConfig(**given)
    method = body.get("method", AUTO)
    if method != AUTO:
        allowed = f"'{AUTO}' or one of {', '.join(METHODS)}"
        if not isinstance(method, str):
            raise FieldError("method", f"method must be {allowed}")
        method = _field("method", lambda v: get_method(v).name, method)
    window = body.get("window")
    if window is not None:
        most = length + MAX_NODES
        window = _field("window", lambda v: integer("window", v, 1, most), window)
        fixed = get_method(method).window if method != AUTO else None
        if fixed is not None and window != fixed:
            raise FieldError("window", f"{method} always runs window {fixed}: window {window} would be ignored")
    return ImageRequest(prompt, seeds, config, None if method == AUTO else method, window, stream)


def _check_text(body: dict) -> None:
    """Refuse a string that is not Unicode text (a lone surrogate such as ``"\\ud800"``, which JSON can
    spell but UTF-8 cannot): the tokenizer, the log and the error's own JSON could not carry it."""
    for key, value in body.items():
        if not _encodable(key):
            raise FieldError("body", f"a field name {key!r} is not valid Unicode text (a lone surrogate)")
        if not _encodable(value):
            raise FieldError(key, f"{key} holds a string that is not valid Unicode text (a lone surrogate)")


def _encodable(value) -> bool:
    """Whether every string in ``value`` (parsed JSON) encodes as UTF-8."""
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(value, dict):
        return all(_encodable(k) and _encodable(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_encodable(v) for v in value)
    return True


def pinned_group(req: ImageRequest, best: str) -> Group | None:
    """The group of a request that pins its decoding; None when the load policy picks it. A window
    without a method pins the window of the best lossless method ``best``."""
    if req.method is None and req.window is None:
        return None
    method = req.method or best
    fixed = get_method(method).window
    return Group(method, fixed or req.window or DEFAULT_WINDOW, req.sampling)
