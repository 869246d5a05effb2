"""`jacobigen serve` as a command: refusals before anything loads, a missing extra, and SIGTERM,
which lets the request in flight finish and exits."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from click.testing import CliRunner

from jacobigen.serve.command import serve

from .live import call, free_port

COMMAND = "from jacobigen.serve.command import serve; serve()"
NO_START = ["--replicas", "2"]  # refused after every option is read: a value let through never starts a server


def test_a_public_bind_needs_an_api_key():
    result = CliRunner().invoke(serve, ["--host", "0.0.0.0"])
    assert result.exit_code == 2 and "--api-key" in result.output


@pytest.mark.parametrize("key", ["", " ", "s3cret ", "clé"])
def test_a_key_no_client_can_send_is_refused(key):
    result = CliRunner().invoke(serve, ["--api-key", key, *NO_START])
    assert result.exit_code == 2 and "--api-key" in result.output and "printable ASCII" in result.output


@pytest.mark.parametrize("seconds", ["nan", "inf", "0", "-1"])
def test_a_timeout_must_be_finite_and_positive(seconds):
    result = CliRunner().invoke(serve, ["--timeout", seconds, *NO_START])
    assert result.exit_code == 2 and "--timeout" in result.output


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_calibration_cache_that_is_no_file_is_refused_at_start(tmp_path, kind):
    """As `generate` refuses it: one line, exit 2, before the model loads (issue 61)."""
    path = tmp_path / "calibration.json"
    path.mkdir() if kind == "folder" else os.mkfifo(path)
    env = {**os.environ, "JACOBIGEN_CACHE": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "jacobigen.cli", "serve", "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 2 and "not a regular file" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_the_step_bound_defaults_to_the_policys():
    from jacobigen.serve.policy import STEP_TOKENS

    assert next(p.default for p in serve.params if p.name == "step_tokens") == STEP_TOKENS


def test_replicas_need_ray():
    result = CliRunner().invoke(serve, ["--replicas", "2"])
    assert result.exit_code == 2 and "--replicas needs --ray" in result.output


def test_importing_the_command_loads_no_server_and_no_torch():
    code = (
        "import sys, jacobigen.serve.command; print(sorted({'fastapi', 'uvicorn', 'torch', 'ray'} & set(sys.modules)))"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "[]"


def test_a_missing_extra_is_one_line_and_exit_2():
    code = f"import sys; sys.modules['fastapi'] = None; {COMMAND}"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 2 and "pip install 'jacobigen[serve]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_sigterm_lets_the_request_in_flight_finish():
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-c", COMMAND, "--port", str(port), "--no-calibrate"], stderr=subprocess.PIPE, text=True
    )
    try:
        while call_or_none(f"{url}/health") is None:
            assert server.poll() is None, server.stderr.read()
            time.sleep(0.2)
        answer = []
        client = threading.Thread(
            target=lambda: answer.append(call(f"{url}/v1/images/generations", {"prompt": "sun", "method": "ar"}))
        )
        client.start()
        while not call(f"{url}/health")[1]["running"]:
            time.sleep(0.05)
        server.send_signal(signal.SIGTERM)
        client.join(120)
        assert answer[0][0] == 200 and answer[0][1]["data"][0]["stats"]["forwards"] == 273
        assert server.wait(60) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once it has drained
    finally:
        if server.poll() is None:
            os.kill(server.pid, signal.SIGKILL)


def call_or_none(url: str):
    try:
        return call(url, timeout=5)
    except OSError:
        return None
