"""``jacobigen serve --ray --replicas N``: the same app, one per Ray Serve replica, each with its own
model and decode thread; Ray's proxy spreads requests over them. Every replica makes the same image
for the same request (the image depends only on prompt, seed, method and window)."""

from __future__ import annotations

import ray
from ray import serve

from .app import Settings, create_app
from .server import load


@serve.ingress()
class Replica:
    """A Ray Serve replica: builds the app (and loads the model) on its worker."""

    def __init__(self, model_spec: str, settings: Settings):
        self.model_spec, self.settings = model_spec, settings

    def __serve_build_asgi_app__(self):
        return create_app(load(self.model_spec, self.settings), self.settings)


def application(model_spec: str, settings: Settings, replicas: int):
    """The Ray Serve application (bound, not yet running)."""
    return serve.deployment(Replica, name="jacobigen", num_replicas=replicas).bind(model_spec, settings)


def deploy(model_spec: str, settings: Settings, host: str, port: int, replicas: int) -> None:
    """Start a local Ray cluster and serve until interrupted."""
    ray.init(include_dashboard=False)
    serve.start(http_options={"host": host, "port": port})
    serve.run(application(model_spec, settings, replicas), name="jacobigen", route_prefix="/", blocking=True)
