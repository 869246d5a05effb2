"""The routers and the key one by one, each on an app of its own with stand-in state (no model, no
decode thread): what /health says of a scheduler, and who the key lets through."""

from types import SimpleNamespace

import pytest
from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient

from jacobigen.serve import info
from jacobigen.serve.access import key_guard
from jacobigen.serve.fields import Group


def app_with(router, **state) -> TestClient:
    app = FastAPI()
    app.include_router(router)
    for name, value in state.items():
        setattr(app.state, name, value)
    return TestClient(app)


@pytest.mark.parametrize("closing, status", [(False, 200), (True, 503)])
def test_health_reads_the_scheduler(closing, status):
    scheduler = SimpleNamespace(group=Group("scd-mc", 16, None), closing=closing, queued=lambda: 3, running={"a", "b"})
    answer = app_with(info.public, scheduler=scheduler, bundle=SimpleNamespace(name="emoji")).get("/health")
    body = answer.json()
    assert answer.status_code == status and body["status"] == ("draining" if closing else "ok")
    assert (body["queued"], body["running"], body["decoding"]) == (3, 2, {"method": "scd-mc", "window": 16})


def test_the_key_lets_only_its_bearer_through():
    refused = []
    app = FastAPI(dependencies=[Depends(key_guard("s3cret", lambda: refused.append(1)))])
    app.get("/x")(lambda: {"ok": True})
    client = TestClient(app)
    assert client.get("/x", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    for headers in ({}, {"Authorization": "Bearer s3cre"}, {"Authorization": "Basic s3cret"}):
        answer = client.get("/x", headers=headers)
        assert answer.status_code == 401 and answer.headers["www-authenticate"] == "Bearer"
    assert len(refused) == 3
    open_app = FastAPI(dependencies=[Depends(key_guard(None, lambda: refused.append(1)))])
    open_app.get("/x")(lambda: {"ok": True})
    assert TestClient(open_app).get("/x").status_code == 200 and len(refused) == 3
