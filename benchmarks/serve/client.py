"""What the serving benchmarks share: a `jacobigen serve` process on a loopback port, a client on the
standard library, and the offline image each served one must equal."""

from __future__ import annotations

import base64
import io
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager

import numpy as np
from PIL import Image

COMMAND = "from jacobigen.serve.command import serve; serve()"  # `jacobigen serve` before it is registered


@contextmanager
def server(*args: str):
    """A `jacobigen serve` subprocess on a free loopback port; yields its URL, stops it on exit."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-c", COMMAND, "--port", str(port), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=5)
                break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError("the server did not start") from None
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(60)


def generate(url: str, body: dict) -> tuple[int, dict, float]:
    """(status, JSON, seconds) of one POST /v1/images/generations."""
    req = urllib.request.Request(f"{url}/v1/images/generations", json.dumps(body).encode())
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=600) as f:
            return f.status, json.load(f), time.perf_counter() - t0
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null"), time.perf_counter() - t0


def pixels(b64: str) -> np.ndarray:
    return np.array(Image.open(io.BytesIO(base64.b64decode(b64))))


class Offline:
    """Offline images (`jacobigen generate`, one at a time, threads chosen as it chooses them), cached
    by (prompt, seed, method, window)."""

    def __init__(self):
        from jacobigen.serve.server import load

        self.bundle, self.cache = load("default"), {}

    def equal(self, prompt: str, image: dict) -> bool:
        key = (prompt, image["seed"], image["method"], image["window"])
        if key not in self.cache:
            _, images = self.bundle.generate([prompt], method=key[2], window=key[3], seed=[key[1]], deterministic=True)
            self.cache[key] = np.array(images[0])
        return bool(np.array_equal(pixels(image["b64_json"]), self.cache[key]))
