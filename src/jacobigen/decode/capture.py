"""The step as one compiled graph (docs/DESIGN.md §3, "The compiled step").

``generate(..., compile=True)`` runs the engine's step (draft -> forward -> verify -> commit)
through ``torch.compile(fullgraph=True, dynamic=False)``: one graph per block shape, no graph break;
traced without code generation the tokens are eager's (inductor's fused kernels may round otherwise). What
makes that possible is kept in the parts themselves: the counter-based draws hash in torch (not
NumPy) while tracing, the schedules never read the device inside the step when compiled (the
proactive tree keeps its fixed universe and masks what its budget leaves out; PJD keeps every
segment slot), and the forward is not timed apart. The host reads the finished rows once per
iteration, outside the graph.

``compile`` may name a torch.compile backend (``"eager"``, ``"aot_eager"``: the same tracing
without code generation, what the tests use to count graph breaks in seconds); ``True`` is inductor.

Without ``compile`` the step is eager and, on CUDA, calls the model through :class:`Graphed` (the
default; ``cuda_graphs=False`` turns it off): each block shape's forward is captured once as a CUDA
graph and replayed, without Python or kernel launches. A failure of either (compile, capture or
replay, whatever the exception) falls back to the eager step or forward with one warning.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from .replay import CudaGraph, OpReplay

RECOMPILE_LIMIT = 256  # graphs per code object: every method, block shape and batch size of a process


def captured(step: Callable, how: bool | str) -> Callable:
    """``step`` compiled as one graph per input shape."""
    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, RECOMPILE_LIMIT)
    config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, 4 * RECOMPILE_LIMIT)
    backend = how if isinstance(how, str) else "inductor"
    return torch.compile(step, fullgraph=True, dynamic=False, backend=backend)


def compile_counts() -> dict[str, int]:
    """Graph breaks and graphs compiled so far in this process (torch.compile's own counters)."""
    counters = torch._dynamo.utils.counters
    return {
        "graph_breaks": sum(counters["graph_break"].values()),
        "graphs": counters["stats"]["unique_graphs"],
    }


class GraphFallback(UserWarning):
    """A graph of the forward failed to capture or replay; that model's forwards run eagerly from then on."""


CAPTURERS: dict[str, type] = {"cuda": CudaGraph}
"""The graph recorder of each device type (``warm(fn)``, ``record(fn)``, ``replay()``, as
:class:`jacobigen.decode.replay.CudaGraph`): where a type is missing, :class:`Graphed` calls the model as
it is. :func:`emulated` adds the CPU through :class:`~jacobigen.decode.replay.OpReplay`, CUDA graphs'
stand-in, so that the tests run this path without a GPU."""

_FAILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {compile: why its graphs failed}


def _failures(model) -> dict:
    """{compile: why} of ``model``'s failed graphs, kept while the model lives (a model that cannot be
    a weak key gets a dict of its own: each wrapper then remembers alone)."""
    try:
        return _FAILED.setdefault(model, {})
    except TypeError:
        return {}


@contextmanager
def emulated(device_type: str = "cpu") -> Iterator[None]:
    """Inside it, ``device_type``'s graphed forwards are recorded and replayed by ``OpReplay``."""
    before = CAPTURERS.get(device_type)
    CAPTURERS[device_type] = OpReplay
    try:
        yield
    finally:
        if before is None:
            del CAPTURERS[device_type]
        else:
            CAPTURERS[device_type] = before


def forward_of(model, device: torch.device, graphs: bool):
    """The model as an eager step calls it: :class:`Graphed` where ``device`` records graphs (CUDA) and
    ``graphs`` asks for them, as it is otherwise (a model already graphed is kept)."""
    if graphs and device.type in CAPTURERS and not isinstance(model, Graphed):
        return Graphed(model)
    return model


class Graphed:
    """A model whose forwards replay graphs (CUDA graphs), one per (rows, block, capacity) and cache: the
    launch-free forward a plain loop or an eager step can call (the ImageModel contract, unchanged).

    A graph reads its inputs from static buffers, so each call copies tokens, positions, mask and
    the cache's lengths into them (a few KB) and replays; the cache's K/V buffers are written in
    place, where the graph was captured. A shape runs eagerly the first time a cache sees it (a
    prefill comes once; a block shape comes back every iteration) and is captured the second time.
    A cache whose buffers moved (a new cache, rows selected) gets new graphs; the graphs of the
    ``CACHES`` most recently used caches are kept (the row views of one cache count as that cache),
    each that has a graph holding its buffers so that no new cache can reuse their addresses under a
    stale graph (for a 7B model that is up to four caches' memory: each decode allocates its own
    cache; a cache only prefilled, as each refill's, is not held).

    Where the device records no graphs (:data:`CAPTURERS`; ``capturer`` names one for every device),
    or for a ``cache=None`` forward, the model runs as it is (compiled, with ``compile``). Any error
    while capturing or replaying falls back to the eager model for good (not compiled either), with
    one :class:`GraphFallback` warning per model: a forward that fails eagerly too raises its own error.
    """

    CACHES = 4

    def __init__(self, model, compile: bool | str = False, capturer: type | None = None):
        self.model, self.how, self.capturer = model, compile, capturer
        self.forward = captured(model, compile) if compile else model
        self.vocab_size, self.max_seq_len = model.vocab_size, model.max_seq_len
        self.needs_prompt_len = getattr(model, "needs_prompt_len", False)
        self.graphs: dict[tuple, tuple[list, dict]] = {}  # cache storages -> (buffers held, shape -> graph)
        self.captures = self.replays = 0
        self._failed = _failures(model)

    def new_cache(self, rows: int, capacity: int):
        return self.model.new_cache(rows, capacity)

    def parameters(self):
        return self.model.parameters()

    @property
    def failure(self) -> str | None:
        """Why this model's graphs (of this ``compile``) failed, None while they work."""
        return self._failed.get(self.how)

    @property
    def status(self) -> str:
        """How the forwards ran: ``graphed`` (a graph ran), ``eager`` or why the graphs were given up."""
        if self.failure is not None:
            return f"eager (graphs failed: {self.failure})"
        return "graphed" if self.captures else "eager"

    def __call__(self, tokens, positions=None, mask=None, cache=None, **extra):
        recorder = self.capturer or CAPTURERS.get(tokens.device.type)
        if self.failure is not None:
            return self.model(tokens, positions, mask, cache, **extra)
        if recorder is None or cache is None or positions is None or mask is None:
            return self.forward(tokens, positions, mask, cache, **extra)
        buffers = (*cache.keys, *cache.values)
        home = tuple(b.untyped_storage().data_ptr() for b in buffers)
        if home not in self.graphs and len(self.graphs) >= self.CACHES:
            del self.graphs[next(iter(self.graphs))]  # the least recently used cache's graphs
        held, graphs = self.graphs[home] = self.graphs.pop(home, ([], {}))
        shapes = (tokens.shape, positions.shape, mask.shape, *(x.shape for x in extra.values()))
        key = (buffers[0].data_ptr(), tuple(map(tuple, shapes)), tuple(extra))
        if key not in graphs:  # its first sighting: eager, and nothing held (a prefill's cache may be dropped)
            graphs[key] = None
            return self.forward(tokens, positions, mask, cache, **extra)
        try:
            if graphs[key] is None:  # the second: captured, the recording computing this call's output
                graphs[key] = self._capture(recorder(), tokens, positions, mask, cache, extra)
                held[:] = buffers  # no new cache may take these addresses while a graph writes there
                return graphs[key][2]
            graph, inputs, out = graphs[key]
            return self._replay(graph, inputs, out, tokens, positions, mask, cache, extra)
        except Exception as error:  # a device that cannot capture this forward: eager from now on
            self._give_up(error)
            return self.model(tokens, positions, mask, cache, **extra)

    def _replay(self, graph, inputs: list, out, tokens, positions, mask, cache, extra):
        for buf, x in zip(inputs, (tokens, positions, mask, cache.lengths, *extra.values()), strict=True):
            buf.copy_(x)
        graph.replay()
        self.replays += 1
        return out

    def _capture(self, graph, tokens, positions, mask, cache, extra):
        inputs = [x.clone() for x in (tokens, positions, mask, cache.lengths, *extra.values())]
        kw = dict(zip(extra, inputs[4:], strict=True))
        # warm-up and capture write this very block's K/V into its own slots, as the replay will
        real = cache.lengths
        cache.lengths = inputs[3]
        try:
            run = lambda: self.forward(inputs[0], inputs[1], inputs[2], cache, **kw)  # noqa: E731
            graph.warm(run)  # compile and autotune outside the capture
            out = graph.record(run)
        finally:
            cache.lengths = real
        self.captures += 1
        return graph, inputs, out

    def _give_up(self, error: Exception) -> None:
        """Forget the graphs and run eagerly; warn the first time this model's graphs fail."""
        self.graphs.clear()
        if self.failure is None:
            why = f"{type(error).__name__}: {str(error)[:200]}"
            warnings.warn(
                f"the graphed forward failed ({why}); the model's forwards run eagerly from now on",
                GraphFallback,
                stacklevel=4,
            )
            self._failed[self.how] = why
