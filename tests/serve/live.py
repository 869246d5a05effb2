"""A real server on a free loopback port, in this process (uvicorn in a thread), and a small HTTP
client on the standard library: the tests talk to the app as clients do."""

from __future__ import annotations

import base64
import io
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from functools import cache

import numpy as np
from PIL import Image

from tests.helpers.need import need

need("fastapi", reason="the serve extra is not installed")
import uvicorn  # noqa: E402

from jacobigen.serve.app import Settings, create_app  # noqa: E402
from jacobigen.serve.server import load  # noqa: E402


@cache
def bundle():
    """The embedded model, threads chosen as `jacobigen generate` and the server choose them."""
    return load("default")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serving(**settings):
    """A running server with these :class:`Settings`; yields its base URL."""
    with running(create_app(bundle(), Settings(**settings))) as url:
        yield url


@contextmanager
def running(app):
    """``app`` served on a free loopback port; yields its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(60)


def call(url: str, body=None, headers: dict | None = None, timeout: float = 120) -> tuple:
    """(status, JSON body, headers) of a GET (no body) or a POST of ``body`` (a dict or bytes)."""
    data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data, {"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as f:
            return f.status, json.loads(f.read() or b"null"), f.headers
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null"), e.headers


def metric(url: str, name: str) -> float:
    """A sample of ``GET /metrics`` (the first line starting with ``name``)."""
    with urllib.request.urlopen(f"{url}/metrics") as f:
        text = f.read().decode()
    return float(next(line.split()[1] for line in text.splitlines() if line.startswith(name)))


def pixels(b64: str) -> np.ndarray:
    return np.array(Image.open(io.BytesIO(base64.b64decode(b64))))


def offline(prompt: str, seed: int, method: str, window: int) -> np.ndarray:
    """The image `jacobigen generate PROMPT --seed SEED --method METHOD --window WINDOW --deterministic`
    makes."""
    _, images = bundle().generate([prompt], method=method, window=window, seed=[seed], deterministic=True)
    return np.array(images[0])


def check_offline(response: dict, prompt: str) -> None:
    """Every image of a response equals offline generation with its seed, method and window (a server
    started with ``deterministic=True``)."""
    for image in response["data"]:
        want = offline(prompt, image["seed"], image["method"], image["window"])
        assert np.array_equal(pixels(image["b64_json"]), want), (prompt, image["seed"], image["method"])
