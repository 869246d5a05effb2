"""`jacobigen serve --ray --replicas 2`: the same app on two Ray Serve replicas behind Ray's proxy,
on loopback; every image still equals offline generation."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.helpers.need import need

from .live import call, check_offline, free_port

pytestmark = pytest.mark.slow


def test_two_replicas_serve_the_same_images():
    ray = need("ray")
    serve = need("ray.serve")
    from jacobigen.serve.app import Settings
    from jacobigen.serve.replicas import application

    port = free_port()
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(
            application("default", Settings(max_batch=2, deterministic=True), replicas=2),
            name="jacobigen",
            route_prefix="/",
        )
        status = serve.status().applications["jacobigen"].deployments["jacobigen"]
        assert status.replica_states.get("RUNNING") == 2
        bodies = [
            {"prompt": p, "seed": i, "method": "scd-mc", "window": 16}
            for i, p in enumerate(["sun", "red heart", "pizza", "cat face"])
        ]
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda b: call(f"http://127.0.0.1:{port}/v1/images/generations", b), bodies))
        for body, (code, response, _) in zip(bodies, answers, strict=True):
            assert code == 200, response
            check_offline(response, body["prompt"])
        assert call(f"http://127.0.0.1:{port}/health")[1]["status"] == "ok"
    finally:
        serve.shutdown()
        ray.shutdown()
