"""One process serving: load the model, run uvicorn, drain on SIGTERM."""

from __future__ import annotations

import uvicorn

from ..models.load import load_bundle
from ..tools.threads import choose_threads
from .app import Settings, create_app


def load(model_spec: str, device: str | None = None, threads: int | None = None):
    """The bundle to serve on ``device`` (None: CUDA when available), with torch's threads chosen
    for it as ``jacobigen generate`` chooses them (``threads``: that many)."""
    bundle = load_bundle(model_spec, device)
    choose_threads(bundle.model, threads)
    return bundle


class DrainingServer(uvicorn.Server):
    """On SIGTERM/SIGINT the scheduler stops taking requests and gives queued and running ones
    ``grace`` seconds before uvicorn waits for their connections (then a little longer) and exits."""

    def __init__(self, config: uvicorn.Config, scheduler, grace: float):
        super().__init__(config)
        self.scheduler, self.grace = scheduler, grace

    def handle_exit(self, sig, frame) -> None:
        self.scheduler.drain(self.grace)
        super().handle_exit(sig, frame)


def run_server(model_spec: str, settings: Settings, host: str, port: int) -> None:
    app = create_app(load(model_spec, settings.device, settings.threads), settings)
    config = uvicorn.Config(app, host=host, port=port, timeout_graceful_shutdown=int(settings.grace) + 5)
    DrainingServer(config, app.state.scheduler, settings.grace).run()
