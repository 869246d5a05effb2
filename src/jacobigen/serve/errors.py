"""The one shape of every error the server answers, as in the OpenAI API:
``{"error": {"message", "type", "param", "code"}}``, ``param`` naming the field at fault (or null).

Whatever answers (a route, the router's 404 and 405, the API-key gate, a job the decode thread
failed, an unexpected fault) builds its body here, so that a client parses one shape.
"""

from __future__ import annotations

from starlette.responses import JSONResponse

LEFT = 499  # the client closed the connection before the answer (nginx's code): counted, never sent


def error_body(status: int, message: str, param: str | None = None) -> dict:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def error(status: int, message: str, param: str | None = None, headers: dict | None = None) -> JSONResponse:
    """An error answer in the one shape."""
    return JSONResponse(error_body(status, message, param), status_code=status, headers=headers)
