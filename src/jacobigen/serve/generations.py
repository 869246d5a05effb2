"""``POST /v1/images/generations``: read the body, queue the request, answer at its end or stream its
events. A client that leaves first, streamed or not, cancels its request (its rows leave the batch
at the next step) and is counted as 499 in ``/metrics``."""

from __future__ import annotations

import asyncio
import json
import logging

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.sse import format_sse_event
from starlette.requests import ClientDisconnect

from .errors import LEFT, error
from .fields import Body, FieldError, parse
from .scheduler import Closed, QueueFull

log = logging.getLogger("uvicorn.error")
MAX_BODY = 16 * 1024  # bytes of a request body

router = APIRouter()


# the body is read by hand (a 413 before it is all read, a 400 for JSON that does not parse), then
# validated as fields.Body: the schema says so
BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": Body.model_json_schema()}}}}


@router.post("/v1/images/generations", openapi_extra=BODY)
async def generations(request: Request) -> Response:
    state = request.app.state
    try:
        raw = await _body(request)
    except _TooLarge:
        return counted(request, error(413, f"the body is larger than {MAX_BODY} bytes", "body"))
    except ClientDisconnect:
        log.info("a client left before sending its whole request")
        return counted(request, Response(status_code=LEFT))
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        return counted(request, error(400, f"the body is not JSON: {e}", "body"))
    except RecursionError:
        return counted(request, error(400, "the body nests deeper than the server parses", "body"))
    loop, events = asyncio.get_running_loop(), asyncio.Queue()

    def post(event: dict) -> None:
        try:
            loop.call_soon_threadsafe(events.put_nowait, event)
        except RuntimeError:  # the event loop has closed: nobody is listening
            pass

    bundle = state.bundle
    try:
        req = parse(body, bundle.defaults, state.size, bundle.name, bundle.layout.length)
        job = state.scheduler.submit(req, post)
    except FieldError as e:
        return counted(request, error(400, str(e), e.field))
    except QueueFull as e:
        return counted(request, error(429, str(e), headers={"Retry-After": str(e.retry_after)}))
    except Closed as e:
        return counted(request, error(503, str(e)))
    if req.stream:
        return StreamingResponse(_stream(request, job, events), media_type="text/event-stream")
    return counted(request, await _answer(request, job, events))


def counted(request: Request, response: Response) -> Response:
    """``response``, its status counted in ``/metrics``."""
    request.app.state.metrics.requests.labels(str(response.status_code)).inc()
    return response


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


async def _stream(request: Request, job, events: asyncio.Queue):
    """Server-sent events, framed by FastAPI's ``format_sse_event``: ``progress`` (tokens committed,
    a preview every few iterations), then ``completed`` (the response) or ``error``. A client that
    leaves cancels the job."""
    status = LEFT
    try:
        while True:
            event = await events.get()
            yield format_sse_event(event=event["event"], data_str=json.dumps(event["data"]))
            if event["event"] != "progress":
                status = event.get("status", 200)
                return
    finally:
        job.cancel()
        if status == LEFT:
            log.info("a client left its stream: request cancelled")
        request.app.state.metrics.requests.labels(str(status)).inc()


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
