"""Who may call: the API key, as FastAPI's bearer security dependency, and HEAD answered as GET.

With ``--api-key`` the ``/v1`` routes, ``/metrics`` and ``/openapi.json`` depend on :func:`key_guard`:
a request without ``Authorization: Bearer KEY`` gets a 401 (counted in ``/metrics``) before its
handler runs. HEAD is the one thing left to a plain ASGI layer (:class:`HeadAsGet`): a route reads the
client's own receive channel there, where a disconnect shows.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, HTTPException
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

REFUSED = "missing or wrong API key: send 'Authorization: Bearer KEY'"
BEARER = HTTPBearer(auto_error=False, description="the server's --api-key")


def key_guard(key: str | None, refused: Callable[[], None]) -> Callable:
    """The dependency that lets a request through with ``key`` (any request when None); ``refused``
    counts each 401."""

    async def guard(given: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]) -> None:
        if key is None:
            return
        if given is None or not hmac.compare_digest(given.credentials.encode(), key.encode()):
            refused()
            raise HTTPException(401, REFUSED, headers={"WWW-Authenticate": "Bearer"})

    return guard


class HeadAsGet:
    """HEAD answered as GET without a body: the headers, Content-Length included, stay GET's."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["method"] == "HEAD":
            scope, send = {**scope, "method": "GET"}, _headless(send)
        await self.app(scope, receive, send)


def _headless(send):
    async def headless(message) -> None:
        if message["type"] == "http.response.body":
            if message.get("more_body"):
                return
            message = {**message, "body": b""}
        await send(message)

    return headless
