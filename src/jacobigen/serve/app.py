"""The HTTP layer: parse, queue, stream. The decoding is the scheduler's (:mod:`.scheduler`).

Every error is one JSON shape (:mod:`.errors`), with the field and what it allows named: a bad
field 400, a missing API key 401, an unknown path 404, a wrong method 405, a large body 413, a full
queue 429 with Retry-After, a fault 500, a draining server 503, a deadline 504. A client that
leaves, streamed or not, cancels its request (its rows leave the batch at the next step) and is
counted as 499 in ``/metrics``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import resources

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from ..core.errors import ConfigError
from ..decode.methods import METHODS
from .errors import LEFT, error_body
from .fields import FieldError, parse
from .images import image_size
from .metrics import Metrics
from .policy import STEP_TOKENS, WindowPolicy, measured_seconds
from .scheduler import Closed, QueueFull, Scheduler

log = logging.getLogger("uvicorn.error")  # shown with uvicorn's own startup lines
MAX_BODY = 16 * 1024  # bytes of a request body
GUARDED = ("/v1/", "/metrics", "/openapi.json")  # paths that need the API key when one is set
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
    step_tokens: int = STEP_TOKENS  # model-row tokens one step may evaluate (policy.py): bounds a step's time


def error(status: int, message: str, param: str | None = None, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, param), status_code=status, headers=headers)


def create_app(bundle, settings: Settings) -> FastAPI:
    """The server of ``bundle`` (a :class:`~jacobigen.models.bundle.ModelBundle`); a
    :class:`ConfigError` for a model it cannot serve."""
    if bundle.layout.frames > 1:
        raise ConfigError(
            f"the {bundle.name} model makes {bundle.layout.frames}-frame clips and jacobigen serve serves images: "
            "make clips with jacobigen generate-video"
        )
    metrics = Metrics(settings.max_batch)
    policy = window_policy(bundle, settings)
    scheduler = Scheduler(bundle, settings.max_queue, settings.timeout, metrics, policy, settings.deterministic)
    size = image_size(bundle)

    @asynccontextmanager
    async def lifespan(app):
        scheduler.start()
        yield
        await asyncio.to_thread(scheduler.close, settings.grace)

    async def http_error(request: Request, exc: HTTPException) -> Response:
        path, status = request.url.path, exc.status_code
        if status == 404:
            message = f"there is no {path}; the endpoints are {ENDPOINTS}"
        elif status == 405:
            message = f"{path} takes {(exc.headers or {}).get('Allow', '?')} only"
        else:
            message = str(exc.detail)
        return error(status, message, headers=exc.headers)

    async def fault(request: Request, exc: Exception) -> Response:
        return error(500, f"the server failed on this request ({type(exc).__name__}); its log has the details")

    # no /docs nor /redoc: they load scripts from other hosts; /openapi.json needs the key when one is set
    app = FastAPI(
        title="jacobigen",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        exception_handlers={HTTPException: http_error, Exception: fault},
    )

    def count(status: int) -> None:
        metrics.requests.labels(str(status)).inc()

    def counted(response: Response) -> Response:
        count(response.status_code)
        return response

    app.state.scheduler = scheduler
    app.add_middleware(Gate, api_key=settings.api_key, refused=lambda: count(401))

    @app.get("/", response_class=HTMLResponse)
    async def page():
        return resources.files(__package__).joinpath("page.html").read_text()

    @app.get("/health")
    async def health():
        group = scheduler.group
        body = {
            "status": "draining" if scheduler.closing else "ok",
            "model": bundle.name,
            "queued": scheduler.queued(),
            "running": len(scheduler.running),
            "decoding": None if group is None else {"method": group.method, "window": group.window},
        }
        if scheduler.closing:  # a load balancer stops sending here; the body still says what is left
            return JSONResponse({**body, **error_body(503, "the server is shutting down")}, status_code=503)
        return body

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
        try:
            raw = await _body(request)
        except _TooLarge:
            return counted(error(413, f"the body is larger than {MAX_BODY} bytes", "body"))
        except ClientDisconnect:
            log.info("a client left before sending its whole request")
            return counted(Response(status_code=LEFT))
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            return counted(error(400, f"the body is not JSON: {e}", "body"))
        except RecursionError:
            return counted(error(400, "the body nests deeper than the server parses", "body"))
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
            return counted(error(400, str(e), e.field))
        except QueueFull as e:
            return counted(error(429, str(e), headers={"Retry-After": str(e.retry_after)}))
        except Closed as e:
            return counted(error(503, str(e)))
        if req.stream:
            return StreamingResponse(_stream(job, events), media_type="text/event-stream")
        return counted(await _answer(request, job, events))

    async def _answer(request: Request, job, events: asyncio.Queue) -> Response:
        """The end of a job that is not streamed; a client that leaves first cancels it."""
        ended = asyncio.ensure_future(_last(events))
        gone = asyncio.ensure_future(_disconnect(request.receive))
        try:
            await asyncio.wait({ended, gone}, return_when=asyncio.FIRST_COMPLETED)
            if not ended.done():
                log.info("a client left before its images were done: request cancelled")
                return Response(status_code=LEFT)
            event = ended.result()
            if event["event"] == "completed":
                return JSONResponse(event["data"])
            return JSONResponse(event["data"], status_code=event["status"])
        finally:
            ended.cancel()
            gone.cancel()
            job.cancel()  # a no-op once the job ended; frees its rows if this task was cancelled

    async def _stream(job, events: asyncio.Queue):
        """Server-sent events: ``progress`` (tokens committed, a preview every few iterations), then
        ``completed`` (the response) or ``error``. A client that leaves cancels the job."""
        status = LEFT
        try:
            while True:
                event = await events.get()
                yield f"event: {event['event']}\ndata: {json.dumps(event['data'])}\n\n"
                if event["event"] != "progress":
                    status = event.get("status", 200)
                    return
        finally:
            job.cancel()
            if status == LEFT:
                log.info("a client left its stream: request cancelled")
            count(status)

    return app


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


class Gate:
    """The ASGI layer in front of the routes: the API key (a 401 is counted through ``refused``), and
    HEAD answered as GET without a body. Plain ASGI, not ``BaseHTTPMiddleware``, so that a route reads
    the client's own receive channel, where a disconnect shows."""

    def __init__(self, app, api_key: str | None, refused: Callable[[], None]):
        self.app, self.key, self.refused = app, api_key, refused

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] == "HEAD":
            scope, send = {**scope, "method": "GET"}, _headless(send)
        if self.key is not None and scope["path"].startswith(GUARDED) and not self._authorized(scope):
            self.refused()
            message = "missing or wrong API key: send 'Authorization: Bearer KEY'"
            response = error(401, message, "authorization", headers={"WWW-Authenticate": "Bearer"})
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _authorized(self, scope) -> bool:
        given = Headers(scope=scope).get("authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {self.key}".encode())


def _headless(send):
    """``send`` with the body left out (HEAD): the headers, Content-Length included, stay GET's."""

    async def headless(message) -> None:
        if message["type"] == "http.response.body":
            if message.get("more_body"):
                return
            message = {**message, "body": b""}
        await send(message)

    return headless


async def _last(events: asyncio.Queue) -> dict:
    """The job's final event (``completed`` or ``error``)."""
    while (event := await events.get())["event"] == "progress":
        pass
    return event


async def _disconnect(receive) -> None:
    """Returns when the client has gone (its request body already read)."""
    while (await receive())["type"] != "http.disconnect":
        pass


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
