"""What the server promises, each checked through real HTTP (issue 50): one error shape for every
status and for HEAD; a client that leaves, streamed or not, cancels its decoding and is counted 499;
a half-sent body or bad input leaves no traceback in the log; the API key covers /openapi.json and
/docs is off; 401s are counted; the log says how the window policy was chosen; SIGTERM drains with
503s and a "draining" health check while the requests in flight finish; n above the queue is a 400,
not a 429 to retry forever; a clip model, a bad --threads and int4 off CUDA are refused in one line."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from jacobigen.serve.app import Settings, create_app

from .live import bundle, free_port, running, serving

KEY = "s3cret"
AUTH = {"Authorization": f"Bearer {KEY}"}
GEN = "/v1/images/generations"
TOKENS = 273  # an embedded-model image: ar commits one per forward
AR = {"prompt": "sun", "method": "ar"}


def ask(url: str, method: str, path: str, body=None, headers: dict | None = None) -> tuple[int, dict, bytes]:
    """(status, headers with lower-case names, body) of one request."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
        conn.request(method, path, data, {"Content-Type": "application/json", **(headers or {})})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def opened(url: str, head: bytes, body: bytes = b"") -> socket.socket:
    """A socket that has sent ``head`` (the request line and headers, CRLF-separated) and ``body``."""
    host, port = url.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)), timeout=60)
    s.sendall(head + b"\r\n\r\n" + body)
    return s


def post_head(body: bytes, length: int | None = None) -> bytes:
    size = len(body) if length is None else length
    return f"POST {GEN} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {size}".encode()


def error_of(status: int, headers: dict, body: bytes) -> dict:
    """The error object of an answer, checked to have the one shape."""
    assert headers["content-type"].startswith("application/json"), headers
    err = json.loads(body)["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == status and err["message"]
    assert err["type"] == ("invalid_request_error" if status < 500 else "server_error")
    return err


def counted(url: str, status: int | str) -> float:
    """``jacobigen_requests_total{status=...}`` (0 before the first)."""
    text = ask(url, "GET", "/metrics", headers=AUTH)[2].decode()
    name = f'jacobigen_requests_total{{status="{status}"}}'
    return next((float(line.split()[1]) for line in text.splitlines() if line.startswith(name)), 0.0)


def sample(url: str, name: str) -> float:
    text = ask(url, "GET", "/metrics", headers=AUTH)[2].decode()
    return float(next(line.split()[1] for line in text.splitlines() if line.startswith(name)))


def health(url: str) -> dict:
    return json.loads(ask(url, "GET", "/health")[2])


def until(check, seconds: float = 60, what: str = "") -> None:
    end = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < end, f"waited {seconds} s for {what}"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def keyed():
    with serving(api_key=KEY, max_batch=2) as url:
        yield url


# --- one error shape ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "method, path, body, headers, status, param",
    [
        ("GET", "/nope", None, AUTH, 404, None),
        ("POST", "/v1/nope", b"{}", AUTH, 404, None),
        ("GET", "/docs", None, AUTH, 404, None),  # off: it loads scripts from other hosts
        ("GET", "/redoc", None, AUTH, 404, None),
        ("GET", GEN, None, AUTH, 405, None),
        ("DELETE", "/health", None, {}, 405, None),
        ("POST", GEN, b"x" * 20000, AUTH, 413, "body"),
        ("POST", GEN, b"{not json", AUTH, 400, "body"),
        ("POST", GEN, b"\xff\xfe", AUTH, 400, "body"),
        ("POST", GEN, b"[" * 5000 + b"]" * 5000, AUTH, 400, "body"),  # nested past the parser's recursion
        ("POST", GEN, {"prompt": "sun", "n": 0}, AUTH, 400, "n"),
        ("POST", GEN, {"prompt": "sun", "temperature": float("nan")}, AUTH, 400, "temperature"),
        ("POST", GEN, {"prompt": "sun", "seed": 10**40}, AUTH, 400, "seed"),
        ("POST", GEN, b'{"prompt": "\\ud800"}', AUTH, 400, "prompt"),  # a lone surrogate
        ("POST", GEN, {"prompt": "sun", "window": 4000}, AUTH, 400, "window"),  # a step past --max-step-tokens
        ("POST", GEN, b'{"prompt": "sun", "\\udfff": 1}', AUTH, 400, "body"),
        ("POST", GEN, AR, {}, 401, "authorization"),
        ("GET", "/metrics", None, {}, 401, "authorization"),
        ("GET", "/openapi.json", None, {"Authorization": "Bearer wrong"}, 401, "authorization"),
    ],
    ids=[
        "404-unknown",
        "404-unknown-v1",
        "404-docs",
        "404-redoc",
        "405-get-generations",
        "405-delete-health",
        "413-large-body",
        "400-not-json",
        "400-not-utf8",
        "400-deep-json",
        "400-n",
        "400-nan",
        "400-seed",
        "400-lone-surrogate",
        "400-surrogate-name",
        "400-step-too-wide",
        "401-no-key",
        "401-metrics",
        "401-schema",
    ],
)
def test_every_error_has_one_shape(keyed, method, path, body, headers, status, param):
    code, got_headers, data = ask(keyed, method, path, body, headers)
    assert code == status, data
    assert error_of(status, got_headers, data)["param"] == param
    if status == 405:
        assert got_headers["allow"] and got_headers["allow"] in error_of(status, got_headers, data)["message"]


@pytest.mark.parametrize(
    "path, headers, status",
    [("/", {}, 200), ("/health", {}, 200), ("/v1/models", AUTH, 200), ("/v1/models", {}, 401), (GEN, AUTH, 405)],
)
def test_head_answers_as_get_without_a_body(keyed, path, headers, status):
    lines = "".join(f"\r\n{k}: {v}" for k, v in headers.items())
    with opened(keyed, f"HEAD {path} HTTP/1.1\r\nHost: x\r\nConnection: close{lines}".encode()) as s:
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    head, _, rest = answer.partition(b"\r\n\r\n")
    assert head.split()[1] == str(status).encode() and rest == b"", answer
    got = {k.lower(): v for k, v in (line.split(": ", 1) for line in head.decode().split("\r\n")[1:])}
    code, get_headers, body = ask(keyed, "GET", path, headers=headers)
    assert code == status and int(got["content-length"]) == len(body)
    assert got["content-type"] == get_headers["content-type"]


def test_the_api_key_covers_the_schema_and_401s_are_counted(keyed):
    before = counted(keyed, 401)
    assert ask(keyed, "GET", "/openapi.json")[0] == 401
    assert ask(keyed, "GET", "/v1/models", headers={"Authorization": "Bearer s3cre"})[0] == 401
    assert counted(keyed, 401) == before + 2
    status, _, schema = ask(keyed, "GET", "/openapi.json", headers=AUTH)
    body = json.loads(schema)["paths"][GEN]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert status == 200 and {"prompt", "n", "seed", "method", "window", "cfg"} <= set(body["properties"])
    assert body["required"] == ["prompt"] and body["additionalProperties"] is False


def test_without_a_key_the_schema_is_open_and_docs_stay_off():
    with serving() as url:
        assert ask(url, "GET", "/openapi.json")[0] == 200
        assert ask(url, "GET", "/docs")[0] == 404 and ask(url, "GET", "/redoc")[0] == 404


def test_a_full_queue_answers_429_in_the_shape():
    """One image decodes and one waits (both streamed, so that they stay in flight): a third is 429."""
    with serving(max_batch=1, max_queue=1) as url:
        body = json.dumps({**AR, "stream": True}).encode()
        first = opened(url, post_head(body), body)
        until(lambda: health(url)["running"] == 1, what="the first image to decode")
        second = opened(url, post_head(body), body)
        until(lambda: health(url)["queued"] == 1, what="the second image to queue")
        status, headers, data = ask(url, "POST", GEN, AR)
        first.close()
        second.close()
        assert status == 429 and int(headers["retry-after"]) >= 1
        assert "queue is full" in error_of(429, headers, data)["message"]
        assert counted(url, 429) == 1
        until(lambda: counted(url, 499) == 2, 30, "both streams to count as left")  # the queued one too
        until(lambda: health(url)["running"] + health(url)["queued"] == 0, 30, "the rows to be freed")


def test_more_images_than_the_queue_holds_is_a_400_not_a_429():
    with serving(max_batch=1, max_queue=1) as url:
        status, headers, data = ask(url, "POST", GEN, {**AR, "n": 2})
        assert status == 400 and error_of(400, headers, data)["param"] == "n" and "retry-after" not in headers


def test_a_deadline_answers_504_in_the_shape():
    with serving(timeout=0.3) as url:
        status, headers, data = ask(url, "POST", GEN, AR)
        assert status == 504 and "limit of 0.3 s" in error_of(504, headers, data)["message"]
        assert counted(url, 504) == 1


def test_a_draining_server_answers_503_and_health_says_draining():
    app = create_app(bundle(), Settings())
    with running(app) as url:
        app.state.scheduler.drain(30)  # what SIGTERM does
        status, headers, data = ask(url, "POST", GEN, AR)
        assert status == 503 and "shutting down" in error_of(503, headers, data)["message"]
        status, headers, data = ask(url, "GET", "/health")
        assert status == 503 and json.loads(data)["status"] == "draining" and error_of(503, headers, data)
        assert ask(url, "GET", "/v1/models")[0] == 200  # the rest still answers


def test_a_failing_decoder_answers_500_in_the_shape_and_the_server_goes_on(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("jacobigen.serve.scheduler.JacobiDecoder", broken)
    with serving() as url:
        status, headers, data = ask(url, "POST", GEN, AR)
        assert status == 500 and "RuntimeError: boom" in error_of(500, headers, data)["message"]
        assert ask(url, "GET", "/health")[0] == 200


def test_a_fault_in_a_route_answers_500_in_the_shape(monkeypatch):
    app = create_app(bundle(), Settings())

    def broken():
        raise RuntimeError("boom")

    with running(app) as url:
        monkeypatch.setattr(app.state.scheduler, "queued", broken)
        status, headers, data = ask(url, "GET", "/health")
        assert status == 500 and "RuntimeError" in error_of(500, headers, data)["message"]


def test_a_wide_block_decodes_fewer_images_at_a_time(monkeypatch):
    """The batch holds no more images than keep one step within ``step_tokens``: scd-mc/32 guided
    (cfg 3: two rows) is 64 tokens an image, so a bound of 128 lets 2 of --max-batch 4 decode together."""
    from jacobigen.serve import scheduler

    limits, run = [], scheduler.run

    def recorded(engine, source, batch, *rest):
        limits.append(batch)
        run(engine, source, batch, *rest)

    monkeypatch.setattr(scheduler, "run", recorded)
    with serving(max_batch=4, step_tokens=128) as url:
        assert ask(url, "POST", GEN, {"prompt": "sun", "method": "scd-mc", "window": 32, "cfg": 3})[0] == 200
        assert ask(url, "POST", GEN, {**AR, "cfg": 3})[0] == 200
    assert limits == [2, 4]  # ar: 2 tokens an image, the batch's own limit


# --- a client that leaves cancels its request ---------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_leaves_stops_its_decoding_and_counts_499(stream):
    """The image is cancelled at the next step: far fewer model calls and tokens than a whole image,
    /metrics counts 499 (not 200), and the server serves on."""
    with serving(max_batch=1) as url:
        body = json.dumps({**AR, "stream": stream}).encode()
        client = opened(url, post_head(body), body)
        until(lambda: sample(url, "jacobigen_tokens_total") > 0, what="decoding to start")
        client.close()
        until(lambda: health(url)["running"] == 0, what="the row to be freed")
        calls, tokens = sample(url, "jacobigen_model_calls_total"), sample(url, "jacobigen_tokens_total")
        assert tokens < TOKENS / 2 and calls < TOKENS / 2, (tokens, calls)
        until(lambda: counted(url, 499) == 1, 5, "the 499 to be counted")
        assert counted(url, 200) == 0
        assert sample(url, "jacobigen_step_compression_count") == 0  # no image finished
        time.sleep(0.3)
        assert sample(url, "jacobigen_model_calls_total") == calls  # nothing decodes any more


def test_a_request_that_ends_before_the_batch_takes_it_does_not_wedge_the_server(monkeypatch):
    """A client that hangs up at once (issue 61): its job ends after the decode thread counted it
    waiting and before the batch admits it. The batch must not step empty rows forever: the decoder
    goes idle, and the next request is served. The gap is widened on purpose: the batch's admission
    waits until the server has counted the client gone."""
    from jacobigen.decode.batching import Batch

    gone, admit = threading.Event(), Batch.admit

    def late_admit(self):
        gone.wait(30)
        admit(self)

    monkeypatch.setattr(Batch, "admit", late_admit)
    with serving(max_batch=1) as url:
        body = json.dumps(AR).encode()
        opened(url, post_head(body), body).close()
        until(lambda: counted(url, 499) == 1, 30, "the client to count as gone")
        gone.set()
        until(lambda: health(url)["decoding"] is None, 30, "the decoder to go idle")
        calls = sample(url, "jacobigen_model_calls_total")
        time.sleep(0.3)
        assert sample(url, "jacobigen_model_calls_total") == calls  # nothing steps
        status, _, data = ask(url, "POST", GEN, AR)
        assert status == 200 and [img["stats"]["forwards"] for img in json.loads(data)["data"]] == [TOKENS]


# --- a real `jacobigen serve` process -------------------------------------------------------------

COMMAND = "from jacobigen.serve.command import serve; serve()"


class Launched:
    def __init__(self, url: str, process: subprocess.Popen, log: Path):
        self.url, self.process, self.log_path = url, process, log

    def log(self) -> str:
        return self.log_path.read_text()


@contextmanager
def launched(tmp: Path, *args: str, env: dict | None = None):
    """`jacobigen serve` on a free port (its stdout and stderr in a file), once /health answers."""
    port = free_port()
    log = tmp / f"serve-{port}.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", COMMAND, "--port", str(port), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
    server = Launched(f"http://127.0.0.1:{port}", process, log)
    try:
        until(lambda: reachable(server.url) or process.poll() is not None, 300, "the server to start")
        assert process.poll() is None, server.log()
        yield server
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)


def reachable(url: str) -> bool:
    try:
        ask(url, "GET", "/health")
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def process(tmp_path_factory):
    with launched(tmp_path_factory.mktemp("serve"), "--no-calibrate", "--max-batch", "2") as server:
        yield server


def test_the_log_says_the_window_policy(process):
    log = process.log()
    line = next(line for line in log.splitlines() if "window policy" in line)
    assert "not calibrated, --no-calibrate" in line and "scd-mc/32 up to 1/8" in line and "ar beyond" in line
    assert log.index("window policy") < log.index("Uvicorn running on")


def half_sent(url: str) -> None:
    """Headers promising 1000 bytes, 10 sent, then the socket closed."""
    opened(url, post_head(b"", 1000), b'{"prompt":').close()


def leave_a_plain_request(url: str) -> None:
    body = json.dumps(AR).encode()
    with opened(url, post_head(body), body):
        until(lambda: health(url)["running"] == 1, what="decoding to start")


def garbage(url: str) -> None:
    with opened(url, b"NOT HTTP AT ALL") as s:
        s.recv(1000)


@pytest.mark.parametrize(
    "send, leaves",
    [
        (half_sent, True),
        (leave_a_plain_request, True),
        (garbage, False),
        (lambda url: ask(url, "POST", GEN, b"[" * 9000 + b"]" * 9000), False),
        (lambda url: ask(url, "POST", GEN, b"\x00\xff garbage"), False),
        (lambda url: ask(url, "POST", GEN, b'{"prompt": "sun"}', {"Content-Length": "abc"}), False),
    ],
    ids=["half-sent body", "plain request left", "not HTTP", "deep JSON", "binary body", "bad length"],
)
def test_bad_input_and_clients_that_leave_leave_no_traceback(process, send, leaves):
    """At most one short line in the log each (uvicorn's access line, or ours for a client that left)."""
    before = len(process.log())
    left = counted(process.url, 499)
    send(process.url)
    if leaves:
        until(lambda: counted(process.url, 499) == left + 1, 30, "the 499 to be counted")
        until(lambda: health(process.url)["running"] == 0, 30, "the row to be freed")
    assert health(process.url)["status"] == "ok"
    written = process.log()[before:]
    new = [line for line in written.splitlines() if not ('"GET /health ' in line or '"GET /metrics ' in line)]
    assert "Traceback" not in written and len(new) <= 1 and all(len(line) < 200 for line in new), new
    if leaves:
        assert len(new) == 1 and "client left" in new[0], new


def test_sigterm_drains_with_503s_then_exits(tmp_path):
    """During the grace the port stays open: /health says draining (503), a new request gets a 503,
    the request in flight finishes, then the process exits."""
    with launched(tmp_path, "--no-calibrate", "--max-batch", "1") as server:
        url, answer = server.url, []
        client = threading.Thread(target=lambda: answer.append(ask(url, "POST", GEN, AR)))
        client.start()
        until(lambda: health(url)["running"] == 1, what="decoding to start")
        server.process.send_signal(signal.SIGTERM)
        until(lambda: ask(url, "GET", "/health")[0] == 503, 10, "/health to say draining")
        status, headers, data = ask(url, "GET", "/health")
        assert json.loads(data)["status"] == "draining" and error_of(503, headers, data)
        status, headers, data = ask(url, "POST", GEN, AR)
        assert status == 503 and "shutting down" in error_of(503, headers, data)["message"]
        client.join(120)
        status, _, data = answer[0]
        assert status == 200 and [img["stats"]["forwards"] for img in json.loads(data)["data"]] == [TOKENS]
        assert server.process.wait(60) in (0, -signal.SIGTERM)
        log = server.log()
        assert "draining" in log and "Traceback" not in log


@pytest.mark.slow
def test_calibration_shows_in_the_log_before_the_port_opens(tmp_path):
    """A first start calibrates (tens of seconds on 2 cores): a line says so before, one after."""
    with launched(tmp_path, "--calibrate", env={"JACOBIGEN_CACHE": str(tmp_path / "cache")}) as server:
        log = server.log()
    start, done = log.index("window policy: calibrating"), log.index("window policy (calibrated in")
    assert start < done < log.index("Uvicorn running on") and "ar" in log[done:].splitlines()[0]


# --- refusals before anything loads -------------------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jacobigen.cli", "serve", *args], capture_output=True, text=True, timeout=120
    )


def test_a_clip_model_exits_2_with_one_line():
    done = cli("--model", "random-video")
    assert done.returncode == 2 and "generate-video" in done.stderr and "Traceback" not in done.stderr


def test_int4_off_cuda_exits_2_naming_int8():
    done = cli("--quantize", "int4", "--device", "cpu")
    assert done.returncode == 2 and "--quantize int8" in done.stderr and "Traceback" not in done.stderr


def test_threads_and_device_are_options_and_checked():
    assert "--threads" in cli("--help").stdout and "--device" in cli("--help").stdout
    done = cli("--threads", "100000")
    assert done.returncode == 2 and "threads" in done.stderr and "Traceback" not in done.stderr
