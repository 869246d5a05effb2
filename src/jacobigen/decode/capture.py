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
"""

from __future__ import annotations

from collections.abc import Callable

import torch

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


class Graphed:
    """A model whose forwards replay CUDA graphs, one per (rows, block, capacity) and cache: the
    launch-free forward a plain loop or an eager step can call (the ImageModel contract, unchanged).

    A graph reads its inputs from static buffers, so each call copies tokens, positions, mask and
    the cache's lengths into them (a few KB) and replays; the cache's K/V buffers are written in
    place, where the graph was captured. A cache whose buffers moved (a new cache, rows selected)
    gets new graphs; the graphs of the ``CACHES`` most recently used caches are kept, each holding its
    buffers so that no new cache can reuse their addresses under a stale graph (for a 7B model that is
    up to four caches' memory: each decode allocates its own cache). On a CPU (or with a
    ``cache=None`` forward) the model runs as it is.
    """

    CACHES = 4

    def __init__(self, model, compile: bool | str = False):
        self.model = model
        self.forward = captured(model, compile) if compile else model
        self.vocab_size, self.max_seq_len = model.vocab_size, model.max_seq_len
        self.needs_prompt_len = getattr(model, "needs_prompt_len", False)
        self.graphs: dict = {}

    def new_cache(self, rows: int, capacity: int):
        return self.model.new_cache(rows, capacity)

    def parameters(self):
        return self.model.parameters()

    def __call__(self, tokens, positions=None, mask=None, cache=None, **extra):
        if cache is None or tokens.device.type != "cuda":
            return self.forward(tokens, positions, mask, cache, **extra)
        buffers = (*cache.keys, *cache.values)
        where = tuple(b.data_ptr() for b in buffers)
        if where not in self.graphs and len(self.graphs) >= self.CACHES:
            del self.graphs[next(iter(self.graphs))]  # the least recently used cache's graphs
        self.graphs[where] = self.graphs.pop(where, None) or (buffers, {})
        graphs = self.graphs[where][1]
        key = (tuple(tokens.shape), tuple(mask.shape), tuple(extra))
        if key not in graphs:
            graphs[key] = self._capture(tokens, positions, mask, cache, extra)
        graph, inputs, out = graphs[key]
        for buf, x in zip(inputs, (tokens, positions, mask, cache.lengths, *extra.values()), strict=True):
            buf.copy_(x)
        graph.replay()
        return out

    def _capture(self, tokens, positions, mask, cache, extra):
        inputs = [x.clone() for x in (tokens, positions, mask, cache.lengths, *extra.values())]
        kw = dict(zip(extra, inputs[4:], strict=True))
        # warm-up and capture write this very block's K/V into its own slots, as the replay will
        real = cache.lengths
        cache.lengths = inputs[3]
        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):  # compile and autotune outside the capture
                    self.forward(inputs[0], inputs[1], inputs[2], cache, **kw)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = self.forward(inputs[0], inputs[1], inputs[2], cache, **kw)
        finally:
            cache.lengths = real
        return graph, inputs, out
