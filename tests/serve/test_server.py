"""The server through HTTP on loopback: concurrent requests share each forward and, with
``--deterministic``, give the images offline generation gives; progress streams; bad input, a full
queue, a deadline, a client that leaves."""

import http.client
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.helpers.need import need

from .live import call, check_offline, metric, running, serving

REQUESTS = [  # one group (method, window, sampling): they share a batch
    {"prompt": "red heart", "seed": 1, "method": "scd-mc", "window": 16},
    {"prompt": "sun", "seed": 2, "method": "scd-mc", "window": 16},
    {"prompt": "grinning face", "seed": 3, "n": 2, "method": "scd-mc", "window": 16},
]


@pytest.fixture(scope="module")
def url():
    with serving(max_batch=4, deterministic=True) as base:
        yield base


def test_concurrent_requests_share_forwards_and_equal_offline_generation():
    with serving(max_batch=4, deterministic=True) as url:
        with ThreadPoolExecutor(len(REQUESTS)) as pool:
            answers = list(pool.map(lambda body: call(f"{url}/v1/images/generations", body), REQUESTS))
        image_forwards, calls = metric(url, "jacobigen_forwards_total"), metric(url, "jacobigen_model_calls_total")
    assert calls < 0.75 * image_forwards, (calls, image_forwards)  # four images, mostly in one forward
    for body, (status, response, _) in zip(REQUESTS, answers, strict=True):
        assert status == 200, response
        assert [img["seed"] for img in response["data"]] == list(range(body["seed"], body["seed"] + body.get("n", 1)))
        for img in response["data"]:
            stats = img["stats"]
            assert stats["forwards"] >= 1 and stats["step_compression"] == pytest.approx(273 / stats["forwards"])
        check_offline(response, body["prompt"])


def events(url: str, body: dict, keep: int | None = None) -> list[tuple[str, dict]]:
    """The server-sent events of a streamed request; with ``keep``, hang up after that many."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    conn.request("POST", "/v1/images/generations", json.dumps({**body, "stream": True}))
    response, out = conn.getresponse(), []
    assert response.status == 200 and response.headers["content-type"].startswith("text/event-stream")
    while keep is None or len(out) < keep:
        lines = [response.readline().decode().strip() for _ in range(3)]  # event, data, blank
        if not lines[0]:
            break
        out.append((lines[0].removeprefix("event: "), json.loads(lines[1].removeprefix("data: "))))
        if out[-1][0] != "progress":
            break
    conn.close()
    return out


def test_progress_streams_then_the_image(url):
    body = {"prompt": "cat face", "seed": 4, "method": "scd-mc", "window": 32}
    stream = events(url, body)
    kinds = [kind for kind, _ in stream]
    assert kinds[-1] == "completed" and set(kinds[:-1]) == {"progress"}
    tokens = [data["tokens"] for kind, data in stream if kind == "progress"]
    assert tokens == sorted(tokens) and tokens[-1] <= 273
    assert any("b64_json" in data for _, data in stream[:-1])  # previews while it draws
    final = stream[-1][1]
    when = final["data"][0]["acceptance"]
    assert len(when) == 16 and all(len(row) == 16 for row in when) and min(min(r) for r in when) >= 0
    check_offline(final, body["prompt"])


def test_a_client_that_leaves_frees_its_row(url):
    done = metric(url, "jacobigen_step_compression_count")  # images finished so far
    assert events(url, {"prompt": "pizza", "method": "ar"}, keep=1)[0][0] == "progress"
    while call(f"{url}/health")[1]["running"]:  # the decode thread frees the row at its next step
        pass
    assert metric(url, "jacobigen_step_compression_count") == done  # cancelled, never finished
    assert call(f"{url}/v1/images/generations", {"prompt": "sun", "method": "scd-mc"})[0] == 200


@pytest.mark.parametrize(
    "body, status, field",
    [
        (b"{not json", 400, "body"),
        (json.dumps({"prompt": "sun", "top_p": 2}).encode(), 400, "top_p"),
        (json.dumps({"prompt": "sun", "method": "nope"}).encode(), 400, "method"),
        (json.dumps({"prompt": "sun", "method": "pjd"}).encode(), 400, "method"),  # batch-dependent blocks
        (json.dumps({"prompt": "x" * 20000}).encode(), 413, "body"),
    ],
)
def test_bad_requests_get_json_errors(url, body, status, field):
    code, response, _ = call(f"{url}/v1/images/generations", body)
    assert code == status and response["error"]["param"] == field and response["error"]["message"]


def test_models_health_and_metrics(url):
    status, models, _ = call(f"{url}/v1/models")
    assert status == 200 and models["data"][0]["id"] == "emoji-names" and "scd-mc" in models["data"][0]["methods"]
    assert call(f"{url}/health")[1]["status"] == "ok"
    counters = ("tokens_total", "forwards_total", "step_compression_count", "request_seconds_count")
    before = {name: metric(url, f"jacobigen_{name}") for name in counters}
    assert call(f"{url}/v1/images/generations", {"prompt": "sun", "method": "ar"})[0] == 200
    grew = {name: metric(url, f"jacobigen_{name}") - before[name] for name in counters}
    # ar: the prefill commits the first token, then one token per forward; one image, one request
    assert grew == {"tokens_total": 272, "forwards_total": 272, "step_compression_count": 1, "request_seconds_count": 1}
    assert metric(url, 'jacobigen_step_compression_bucket{le="1.0"}') >= 1  # ar's image: compression 1
    assert metric(url, "jacobigen_tokens_per_second") > 0 and metric(url, "jacobigen_forwards_per_second") > 0
    idle = ("jacobigen_queue_depth", "jacobigen_batch_rows", "jacobigen_batch_occupancy")
    assert [metric(url, name) for name in idle] == [0, 0, 0]


def test_a_full_queue_answers_429_with_retry_after():
    """One image decodes, one waits; a third request arriving meanwhile finds the queue full."""
    body = {"prompt": "sun", "method": "ar"}
    with serving(max_batch=1, max_queue=1) as base, ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(lambda _: call(f"{base}/v1/images/generations", body), range(3)))
    full = [(r, h) for status, r, h in answers if status == 429]
    assert full and sorted(status for status, _, _ in answers).count(200) >= 1
    response, headers = full[0]
    assert int(headers["Retry-After"]) >= 1 and "queue is full" in response["error"]["message"]


def test_quantized_weights_are_served():
    need("torchao")
    from jacobigen.core.quantize import quantized_as
    from jacobigen.serve.app import Settings, create_app
    from jacobigen.serve.server import load

    bundle = load("random", Settings(threads=1, quantize="int8"))
    assert quantized_as(bundle.model) == "int8"
    with running(create_app(bundle, Settings())) as base:
        status, response, _ = call(f"{base}/v1/images/generations", {"prompt": "sun", "method": "ar"})
    assert status == 200 and response["data"][0]["stats"]["forwards"] > 0


def test_a_clip_model_is_refused_with_a_clear_message():
    from jacobigen.core.errors import ConfigError
    from jacobigen.serve.app import Settings, create_app
    from jacobigen.serve.server import load

    with pytest.raises(ConfigError, match="frame clips and jacobigen serve serves images"):
        create_app(load("random-video"), Settings())


def test_a_request_past_its_deadline_is_cancelled():
    with serving(timeout=0.2) as base:
        status, response, _ = call(f"{base}/v1/images/generations", {"prompt": "sun", "method": "ar"})
        assert status == 504 and "limit of 0.2 s" in response["error"]["message"]
        assert call(f"{base}/health")[1]["running"] == 0


def test_api_key_guards_the_api_not_the_health_check():
    with serving(api_key="s3cret") as base:
        assert call(f"{base}/v1/models")[0] == 401
        assert call(f"{base}/v1/models", headers={"Authorization": "Bearer s3cret"})[0] == 200
        assert call(f"{base}/health")[0] == 200
