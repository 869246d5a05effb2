"""The body of ``POST /v1/images/generations``: a Pydantic model, checked field by field.

The OpenAI images API's fields (``prompt``, ``n``, ``size``, ``response_format``) plus the decoder's
(``method``, ``window``, ``seed`` and the sampling). ``null`` means "not set" (OpenAI clients send it
for the fields they leave out). Types, the unknown fields and the server's own limits are Pydantic's;
the decoder's ranges are the library's (its ``ConfigError`` messages), so the server refuses exactly
what ``jacobigen generate`` refuses. The first validation error becomes a :class:`FieldError` naming
its field: the OpenAI-shaped 400.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

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


def _refused(message: str, field: str | None = None) -> PydanticCustomError:
    """A refusal with its own message (``field``: the field it names, where Pydantic's location has
    none); the message is passed as a value, so that braces in it stay as they are."""
    return PydanticCustomError("refused", "{message}", {"message": message, "field": field})


def _library(check, value):
    """``check(value)``, its ConfigError (or TypeError) a validation error with the library's message."""
    try:
        return check(value)
    except (ConfigError, TypeError) as e:
        raise _refused(str(e)) from e


class Body(BaseModel):
    """The JSON body as a client sends it. Validated with the context ``size`` ("WxH"), ``model``
    (the served model's name) and ``length`` (its image tokens)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    prompt: str
    n: Annotated[int, Field(ge=1, le=MAX_IMAGES)] = 1
    size: str | None = None
    response_format: Literal["b64_json"] = "b64_json"
    method: Any = AUTO
    window: Any = None
    seed: Annotated[Any, Field(validate_default=True)] = 0  # the seeds of the n images
    stream: bool = False
    model: str | None = None
    user: Any = None
    cfg: Any = None
    temperature: Any = None
    top_k: Any = None
    top_p: Any = None

    @model_validator(mode="before")
    @classmethod
    def _text_and_nulls(cls, body):
        if not isinstance(body, dict):
            raise _refused("the body must be a JSON object")
        for key, value in body.items():
            if not _encodable(key):
                raise _refused("a field name is not valid Unicode text (a lone surrogate)", "body")
            if not _encodable(value):
                raise _refused(f"{key} holds a string that is not valid Unicode text (a lone surrogate)", key)
        return {k: v for k, v in body.items() if v is not None or k not in cls.model_fields}  # null: not set

    @field_validator("prompt")
    @classmethod
    def _prompt(cls, prompt: str) -> str:
        if not prompt.strip():
            raise _refused("prompt must be a non-empty string")
        if len(prompt) > MAX_PROMPT_CHARS:
            raise _refused(f"prompt has {len(prompt)} characters; at most {MAX_PROMPT_CHARS}")
        return prompt

    @field_validator("size")
    @classmethod
    def _size(cls, size: str, info: ValidationInfo) -> str:
        if size != info.context["size"]:
            raise _refused(f"size {size!r}: this model makes {info.context['size']} images only")
        return size

    @field_validator("model")
    @classmethod
    def _model(cls, model: str, info: ValidationInfo) -> str:
        if model != info.context["model"]:
            raise _refused(f"model {model!r} is not served here; this server serves {info.context['model']!r}")
        return model

    @field_validator("method")
    @classmethod
    def _method(cls, method):
        if method == AUTO:
            return method
        if not isinstance(method, str):
            raise _refused(f"method must be '{AUTO}' or one of {', '.join(METHODS)}")
        return _library(lambda v: get_method(v).name, method)

    @field_validator("window")
    @classmethod
    def _window(cls, window, info: ValidationInfo):
        window = _library(lambda v: integer("window", v, 1, info.context["length"] + MAX_NODES), window)
        method = info.data.get("method", AUTO)
        fixed = get_method(method).window if method != AUTO else None
        if fixed is not None and window != fixed:
            raise _refused(f"{method} always runs window {fixed}: window {window} would be ignored")
        return window

    @field_validator("seed")
    @classmethod
    def _seed(cls, seed, info: ValidationInfo) -> list[int]:
        return _library(lambda v: image_seeds(v, info.data.get("n", 1)), seed)

    @field_validator(*SAMPLING)
    @classmethod
    def _sampling(cls, value, info: ValidationInfo):
        _library(lambda v: SamplingConfig(**{info.field_name: v}), value)
        return value


def parse(body, defaults: dict, size: str, model_name: str, length: int) -> ImageRequest:
    """The request in ``body`` (parsed JSON) for a model whose images are ``size`` ("WxH") and of
    ``length`` tokens; ``defaults``: the model's recommended sampling."""
    try:
        got = Body.model_validate(body, context={"size": size, "model": model_name, "length": length})
    except ValidationError as e:
        raise _field_error(e.errors()[0]) from None
    sampling = {k: getattr(got, k) if getattr(got, k) is not None else defaults.get(k) for k in SAMPLING}
    config = SamplingConfig(**{k: v for k, v in sampling.items() if v is not None})
    method = None if got.method == AUTO else got.method
    return ImageRequest(got.prompt, got.seed, config, method, got.window, got.stream)


def _field_error(err: dict) -> FieldError:
    """Pydantic's first error as the field it names and a message that says what it allows."""
    loc = err["loc"]
    field = str(loc[0]) if loc else "body"
    if err["type"] == "extra_forbidden":
        fields = ", ".join(Body.model_fields)
        return FieldError(field, f"unknown field {field!r}; the fields are {fields}")
    if err["type"] == "refused":
        return FieldError(err["ctx"]["field"] or field, err["ctx"]["message"])
    if err["type"] == "missing":
        return FieldError(field, f"{field} is required")
    return FieldError(field, f"{field}: {err['msg'][0].lower()}{err['msg'][1:]}, got {err['input']!r}")


def _encodable(value) -> bool:
    """Whether every string in ``value`` (parsed JSON) encodes as UTF-8: JSON can spell a lone
    surrogate (``"\\ud800"``) that UTF-8 cannot, and neither the tokenizer nor the log can carry it."""
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
