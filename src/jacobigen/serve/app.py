"""The HTTP layer: parse, queue, stream. The decoding is the scheduler's (:mod:`.scheduler`).

Errors are JSON ``{"error": {"message", "type", "param", "code"}}`` as in the OpenAI API, with the
field and what it allows named; a full queue answers 429 with Retry-After, a draining server 503.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import resources

import torch
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..core.errors import ConfigError
from ..decode.methods import METHODS
from .fields import FieldError, parse
from .images import pictures
from .metrics import Metrics
from .policy import WindowPolicy, measured_seconds
from .scheduler import Closed, QueueFull, Scheduler

log = logging.getLogger("uvicorn.error")  # shown with uvicorn's own startup lines
MAX_BODY = 16 * 1024  # bytes of a request body
WAIT_POLL = 0.5  # seconds between checks that a waiting client is still there


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


def error(status: int, message: str, param: str | None = None, headers: dict | None = None) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = {"error": {"message": message, "type": kind, "param": param, "code": status}}
    return JSONResponse(body, status_code=status, headers=headers)


def create_app(bundle, settings: Settings) -> FastAPI:
    """The server of ``bundle`` (a :class:`~jacobigen.models.bundle.ModelBundle`); a
    :class:`ConfigError` for a model it cannot serve."""
    if bundle.layout.frames > 1:
        raise ConfigError(
            f"the {bundle.name} model makes {bundle.layout.frames}-frame clips and jacobigen serve serves images: "
            "make clips with jacobigen generate-video"
        )
    metrics = Metrics(settings.max_batch)
    policy = WindowPolicy(settings.max_batch)
    if settings.calibrate:
        policy = policy.calibrated(measured_seconds(bundle))
        log.info("window policy: %s", ", ".join(f"{m}/{w}" for m, w in policy.rungs))
    scheduler = Scheduler(bundle, settings.max_queue, settings.timeout, metrics, policy, settings.deterministic)
    width, height = pictures(bundle, torch.zeros(1, bundle.layout.length, dtype=torch.int64))[0].size
    size = f"{width}x{height}"

    @asynccontextmanager
    async def lifespan(app):
        scheduler.start()
        yield
        await asyncio.to_thread(scheduler.close, settings.grace)

    app = FastAPI(title="jacobigen", lifespan=lifespan)
    app.state.scheduler = scheduler

    def authorized(request: Request) -> bool:
        if settings.api_key is None:
            return True
        given = request.headers.get("authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {settings.api_key}".encode())

    @app.middleware("http")
    async def guard(request: Request, call_next):
        if request.url.path.startswith(("/v1/", "/metrics")) and not authorized(request):
            return error(401, "missing or wrong API key: send 'Authorization: Bearer KEY'", "authorization")
        return await call_next(request)

    @app.get("/", response_class=HTMLResponse)
    async def page():
        return resources.files(__package__).joinpath("page.html").read_text()

    @app.get("/health")
    async def health():
        group = scheduler.group
        return {
            "status": "draining" if scheduler.closing else "ok",
            "model": bundle.name,
            "queued": scheduler.queued(),
            "running": len(scheduler.running),
            "decoding": None if group is None else {"method": group.method, "window": group.window},
        }

    @app.get("/v1/models")
    async def models():
        card = {"id": bundle.name, "object": "model", "owned_by": "jacobigen", "size": size, "methods": list(METHODS)}
        return {"object": "list", "data": [card]}

    @app.get("/metrics")
    async def scrape():
        metrics.refresh()
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/v1/images/generations")
    async def generations(request: Request):
        response = await _generate(request)
        metrics.requests.labels(str(response.status_code)).inc()
        return response

    async def _generate(request: Request):
        try:
            body = json.loads(await _body(request))
        except _TooLarge:
            return error(413, f"the body is larger than {MAX_BODY} bytes", "body")
        except (ValueError, UnicodeDecodeError) as e:
            return error(400, f"the body is not JSON: {e}", "body")
        loop, events = asyncio.get_running_loop(), asyncio.Queue()

        def post(event: dict) -> None:
            try:
                loop.call_soon_threadsafe(events.put_nowait, event)
            except RuntimeError:  # the event loop has closed: nobody is listening
                pass

        try:
            req = parse(body, bundle.defaults, size, bundle.name, bundle.layout.length)
            job = scheduler.submit(req, post)
        except FieldError as e:
            return error(400, str(e), e.field)
        except QueueFull as e:
            return error(429, str(e), headers={"Retry-After": str(e.retry_after)})
        except Closed as e:
            return error(503, str(e))
        if req.stream:
            return StreamingResponse(_stream(job, events), media_type="text/event-stream")
        try:
            while True:
                try:
                    event = await asyncio.wait_for(events.get(), WAIT_POLL)
                except asyncio.TimeoutError:
                    if await request.is_disconnected():
                        job.cancel()
                        return Response(status_code=499)
                    continue
                if event["event"] == "completed":
                    return JSONResponse(event["data"])
                if event["event"] == "error":
                    return JSONResponse(event["data"], status_code=event["status"])
        finally:
            job.cancel()  # a no-op once the job ended; frees its rows if this task was cancelled

    async def _stream(job, events: asyncio.Queue):
        """Server-sent events: ``progress`` (tokens committed, a preview every few iterations), then
        ``completed`` (the response) or ``error``. A client that leaves cancels the job."""
        try:
            while True:
                event = await events.get()
                yield f"event: {event['event']}\ndata: {json.dumps(event['data'])}\n\n"
                if event["event"] != "progress":
                    return
        finally:
            job.cancel()

    return app


class _TooLarge(Exception):
    pass


async def _body(request: Request) -> bytes:
    """The body, refused past MAX_BODY bytes before it is all read."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > MAX_BODY:
        raise _TooLarge
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise _TooLarge
    return body
