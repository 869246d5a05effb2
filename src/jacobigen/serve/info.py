"""The routes that say what the server is and how it does: the page, ``/health``, ``/v1/models``,
``/metrics`` and the OpenAPI schema. Each reads the app's state (``bundle``, ``size``, ``scheduler``,
``metrics``), so that it can be tried on an app of its own."""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..decode.methods import METHODS
from .errors import error_body

public = APIRouter()  # open to anyone: a load balancer's health check, the page
guarded = APIRouter()  # behind the API key when one is set


@public.get("/", response_class=HTMLResponse)
async def page() -> str:
    return resources.files(__package__).joinpath("page.html").read_text()


@public.get("/health")
async def health(request: Request):
    state = request.app.state
    scheduler, group = state.scheduler, state.scheduler.group
    body = {
        "status": "draining" if scheduler.closing else "ok",
        "model": state.bundle.name,
        "queued": scheduler.queued(),
        "running": len(scheduler.running),
        "decoding": None if group is None else {"method": group.method, "window": group.window},
    }
    if scheduler.closing:  # a load balancer stops sending here; the body still says what is left
        return JSONResponse({**body, **error_body(503, "the server is shutting down")}, status_code=503)
    return body


@guarded.get("/v1/models")
async def models(request: Request) -> dict:
    state = request.app.state
    card = {"id": state.bundle.name, "object": "model", "owned_by": "jacobigen", "size": state.size}
    return {"object": "list", "data": [{**card, "methods": list(METHODS)}]}


@guarded.get("/metrics")
async def scrape(request: Request) -> Response:
    metrics = request.app.state.metrics
    metrics.refresh()
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)


@guarded.get("/openapi.json", include_in_schema=False)
async def schema(request: Request) -> dict:
    return request.app.openapi()
