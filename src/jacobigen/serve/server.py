"""One process serving: load the model, run uvicorn, drain on SIGTERM."""

from __future__ import annotations

import logging
import threading
import time

import uvicorn

from ..models.load import load_bundle
from ..tools.threads import choose_threads
from .app import Settings, create_app

log = logging.getLogger("uvicorn.error")
DRAIN_POLL = 0.1  # seconds between checks that the drain is done


def load(model_spec: str, settings: Settings | None = None):
    """The bundle to serve on ``settings.device`` (None: CUDA when available), with torch's threads
    chosen for it as ``jacobigen generate`` chooses them (``settings.threads``: that many) and its
    linear weights quantized as ``settings.quantize`` says (None: as stored), in ``settings.dtype``
    (None: the model's default)."""
    settings = settings or Settings()
    bundle = load_bundle(model_spec, settings.device, quantize=settings.quantize, dtype=settings.dtype)
    if settings.quantize:
        log.info("weights: %s (images follow the quantized model's distribution)", settings.quantize)
    choose_threads(bundle.model, settings.threads)
    return bundle


class DrainingServer(uvicorn.Server):
    """On SIGTERM/SIGINT the server keeps its port while it drains: new requests get 503 and /health
    says "draining" (503), while queued and running requests get ``grace`` seconds to finish (past
    that, a 503). Once nothing is queued or decoding, uvicorn sends the last answers and exits. A
    second signal cuts the grace short: what is left gets its 503 at the next step."""

    def __init__(self, config: uvicorn.Config, scheduler, grace: float):
        super().__init__(config)
        self.scheduler, self.grace = scheduler, grace

    def handle_exit(self, sig, frame) -> None:
        if self.scheduler.closing or self.should_exit:
            self.scheduler.drain(0)
            super().handle_exit(sig, frame)
            return
        log.info(
            "draining: new requests get 503; the %d images in flight or queued get %g s to finish "
            "(signal again to stop now)",
            self.scheduler.load(),
            self.grace,
        )
        self.scheduler.drain(self.grace)
        threading.Thread(target=self._exit_when_drained, args=(sig,), name="jacobigen-drain", daemon=True).start()

    def _exit_when_drained(self, sig) -> None:
        end = time.monotonic() + self.grace + 30  # past the grace the scheduler fails what is left
        while self.scheduler.load() and time.monotonic() < end:
            time.sleep(DRAIN_POLL)
        if not self.should_exit:
            super().handle_exit(sig, None)


def run_server(model_spec: str, settings: Settings, host: str, port: int) -> None:
    # the config first: it sets up uvicorn's logging, so that what loading and calibrating log shows
    config = uvicorn.Config(None, host=host, port=port, timeout_graceful_shutdown=int(settings.grace) + 5)  # type: ignore[arg-type]
    config.app = create_app(load(model_spec, settings), settings)
    DrainingServer(config, config.app.state.scheduler, settings.grace).run()
