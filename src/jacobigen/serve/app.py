"""The HTTP layer, put together: settings, state, routers, the key, the one error shape. The routes
are :mod:`.info`'s and :mod:`.generations`'; the decoding is the scheduler's (:mod:`.scheduler`).

Every error is one JSON shape (:mod:`.errors`), with the field and what it allows named: a bad
field 400, a missing API key 401, an unknown path 404, a wrong method 405, a large body 413, a full
queue 429 with Retry-After, a fault 500, a draining server 503, a deadline 504. A client that
leaves, streamed or not, cancels its request (its rows leave the batch at the next step) and is
counted as 499 in ``/metrics``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import Depends, FastAPI, Request
from fastapi.responses import Response
from starlette.exceptions import HTTPException

from ..core.errors import ConfigError
from . import generations, info
from .access import HeadAsGet, key_guard
from .errors import error
from .images import image_size
from .metrics import Metrics
from .policy import STEP_TOKENS, WindowPolicy, measured_seconds
from .scheduler import Scheduler

log = logging.getLogger("uvicorn.error")  # shown with uvicorn's own startup lines
ENDPOINTS = "POST /v1/images/generations, GET /v1/models, /health, /metrics, /"


@dataclass(frozen=True)
class Settings:
    max_batch: int = 8
    max_queue: int = 64  # images waiting
    timeout: float = 120.0  # seconds from submit to the last image
    grace: float = 30.0  # seconds that queued and running requests get on shutdown
    api_key: str | None = None  # required as "Authorization: Bearer KEY" on /v1 and /metrics when set
    calibrate: bool = False  # time the policy's rungs at start and keep those that pay (policy.py)
    deterministic: bool = False  # row-invariant kernels: each image bit-identical to its offline generate
    device: str | None = None  # where the model loads (None: CUDA when available)
    threads: int | None = None  # torch threads (None: as `jacobigen generate` chooses them)
    quantize: str | None = None  # int8 / int4 linear weights (torchao), None: the model's dtype
    dtype: str | None = None  # the model's dtype (--dtype), None: its default
    step_tokens: int = STEP_TOKENS  # model-row tokens one step may evaluate (policy.py): bounds a step's time


def create_app(bundle, settings: Settings) -> FastAPI:
    """The server of ``bundle`` (a :class:`~jacobigen.models.bundle.ModelBundle`): its state, its
    routers (:mod:`.info`, :mod:`.generations`), the key on the guarded ones (:mod:`.access`) and the
    one error shape; a :class:`ConfigError` for a model it cannot serve."""
    if bundle.layout.frames > 1:
        raise ConfigError(
            f"the {bundle.name} model makes {bundle.layout.frames}-frame clips and jacobigen serve serves images: "
            "make clips with jacobigen generate-video"
        )
    metrics = Metrics(settings.max_batch)
    policy = window_policy(bundle, settings)
    scheduler = Scheduler(bundle, settings.max_queue, settings.timeout, metrics, policy, settings.deterministic)

    @asynccontextmanager
    async def lifespan(app):
        scheduler.start()
        yield
        await asyncio.to_thread(scheduler.close, settings.grace)

    # no /docs nor /redoc: they load scripts from other hosts; /openapi.json is a guarded route
    app = FastAPI(
        title="jacobigen",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        exception_handlers={HTTPException: http_error, Exception: fault},
    )
    app.state.bundle, app.state.size = bundle, image_size(bundle)
    app.state.scheduler, app.state.metrics = scheduler, metrics
    guard = Depends(key_guard(settings.api_key, metrics.requests.labels("401").inc))
    app.include_router(info.public)
    app.include_router(info.guarded, dependencies=[guard])
    app.include_router(generations.router, dependencies=[guard])
    app.add_middleware(HeadAsGet)
    return app


async def http_error(request: Request, exc: HTTPException) -> Response:
    """The router's 404 and 405 and the key's 401, in the one shape."""
    path, status = request.url.path, exc.status_code
    if status == 404:
        message = f"there is no {path}; the endpoints are {ENDPOINTS}"
    elif status == 405:
        message = f"{path} takes {(exc.headers or {}).get('Allow', '?')} only"
    else:
        message = str(exc.detail)
    return error(status, message, "authorization" if status == 401 else None, exc.headers)


async def fault(request: Request, exc: Exception) -> Response:
    return error(500, f"the server failed on this request ({type(exc).__name__}); its log has the details")


def window_policy(bundle, settings: Settings) -> WindowPolicy:
    """The ladder of (method, window) by load, calibrated on this machine when asked; said in the log."""
    policy = WindowPolicy(settings.max_batch, step_tokens=settings.step_tokens)
    if not settings.calibrate:
        log.info("window policy (not calibrated, --no-calibrate): %s", policy.describe())
        return policy
    from ..tools.auto import cache_file

    log.info(
        "window policy: calibrating on this machine (measured once, then read from %s; --no-calibrate skips it) ...",
        cache_file(),
    )
    start = time.monotonic()
    policy = policy.calibrated(measured_seconds(bundle))
    log.info("window policy (calibrated in %.1f s): %s", time.monotonic() - start, policy.describe())
    return policy
