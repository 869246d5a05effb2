"""The step replayed as a recorded graph (docs/DESIGN.md §7): no Python runs between forwards.

A CUDA graph replays kernels on the addresses they were captured with. The step's state lives in
attributes that each stateful part names in its ``STATE`` (the flight's, the cache's, the
schedule's and the drafters' tensors, reached from the engine's roots); the step mostly replaces
them rather than writing in place, so the recorded step is *closed*: after it, each replaced
tensor is copied into the one it replaced and the attribute points at that one again. State then
lives at fixed addresses and a replay advances it in place. Before each replay, state that the
host replaced between steps (the loop's counts, an admitted row) is copied in; state of another
shape (a new batch size, a new decode) is recorded anew.

The first step of a new state runs as it is, on the static path (it builds what the step makes
lazily and warms the kernels); the next one is recorded. Recording checks that the step changed
no Python value (a replay could not change it either).

:class:`OpReplay` is a CUDA graph's stand-in on any device: it records the step's ATen ops with the
very tensors they read and write, and replays them on those tensors, without our Python; a host
read while recording is an error, as it is under CUDA capture. The tests run every preset through
it on the CPU; only :class:`CudaGraph` needs the device.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

from ..core.contract import sync
from ..core.recording import recorded

_aten = torch.ops.aten
# ops whose result the host must read (a value, or a shape that depends on values)
HOST_READS = {
    _aten._local_scalar_dense.default, _aten.item.default, _aten.is_nonzero.default, _aten.equal.default,
    _aten.nonzero.default, _aten.masked_select.default, _aten.unique_consecutive.default, _aten._unique2.default,
}  # fmt: skip


def _reads_host(func, args) -> bool:
    if func in HOST_READS:
        return True
    masks = args[1] if func in (_aten.index.Tensor, _aten.index_put_.default, _aten.index_put.default) else ()
    return any(isinstance(m, torch.Tensor) and m.dtype == torch.bool for m in masks)


_SCALARS = (int, float, bool, str, type(None), torch.dtype, torch.device)


class CudaGraph:
    """Records by CUDA stream capture: nothing runs while capturing, so the record replays once."""

    def warm(self, fn: Callable):
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        try:
            with torch.cuda.stream(stream):  # library handles and autotuning set up outside the capture
                return fn()
        finally:  # a warm-up that fails (the caller then runs eagerly) must not leave its writes racing
            torch.cuda.current_stream().wait_stream(stream)

    def record(self, fn: Callable):
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            out = fn()
        self.graph.replay()
        return out

    def replay(self) -> None:
        self.graph.replay()


class _Tape(TorchDispatchMode):
    def __init__(self, ops: list):
        super().__init__()
        self.ops = ops

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if _reads_host(func, args):
            raise RuntimeError(f"the recorded step reads the device ({func}); a graph replay cannot")
        out = func(*args, **(kwargs or {}))
        self.ops.append((func, args, kwargs or {}, out))
        return out


class OpReplay:
    """Records by running the step under a dispatch mode that keeps every ATen op with its
    arguments; a replay runs the ops again, each on the tensors it had (an op's output stands for
    what the same op outputs in this replay), and writes the recorded result's new values into the
    result the caller holds. The tensors recorded stay alive, as a CUDA graph's pool does."""

    def warm(self, fn: Callable):
        return fn()

    def record(self, fn: Callable):
        self.ops: list = []
        with _Tape(self.ops), torch.compiler.set_stance("force_eager"):  # a compiled fn records its eager ops
            out = fn()
        self.result = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        return out

    def replay(self) -> None:
        fresh: dict[int, torch.Tensor] = {}

        def now(x):
            return fresh.get(id(x), x) if isinstance(x, torch.Tensor) else x

        for func, args, kwargs, out in self.ops:
            new = func(*tree_map(now, args), **tree_map(now, kwargs))
            for old, t in zip(tree_leaves(out), tree_leaves(new), strict=True):
                if isinstance(old, torch.Tensor) and old is not t:
                    fresh[id(old)] = t
        for t in self.result:
            if id(t) in fresh:
                t.copy_(fresh[id(t)])


_local = threading.local()


@contextmanager
def on_cpu() -> Iterator[None]:
    """Engines built inside replay their step through :class:`OpReplay` (the tests' CUDA graph)."""
    _local.on = True
    try:
        yield
    finally:
        _local.on = False


def recorder_for(device: torch.device, compile: bool | str) -> type | None:
    """CUDA graphs for a compiled step on CUDA; the stand-in where a test asks for it."""
    if getattr(_local, "on", False):
        return OpReplay
    return CudaGraph if compile and device.type == "cuda" else None


def _ours(x) -> bool:
    return type(x).__module__.startswith("jacobigen.") and hasattr(x, "__dict__") and not isinstance(x, torch.nn.Module)


def _flatten(x, tensors: list, shape: list, seen: set) -> None:
    """x's tensors, in order, and the rest of it (the tensors' shapes and dtypes, Python values)."""
    if isinstance(x, torch.Tensor):
        tensors.append(x)
        shape.append((tuple(x.shape), x.dtype))
    elif isinstance(x, _SCALARS):
        shape.append(x)
    elif isinstance(x, (tuple, list, dict)):
        items = list(x.values()) if isinstance(x, dict) else x
        shape.append((type(x), tuple(x) if isinstance(x, dict) else len(x)))
        for e in items:
            _flatten(e, tensors, shape, seen)
    elif _ours(x) and id(x) not in seen:
        seen.add(id(x))
        shape.append(type(x))
        for name, e in vars(x).items():
            shape.append(name)
            _flatten(e, tensors, shape, seen)
    else:
        shape.append(("object", id(x)))


def flatten(x) -> tuple[list[torch.Tensor], list]:
    tensors: list = []
    shape: list = []
    _flatten(x, tensors, shape, set())
    return tensors, shape


class Slot:
    """One attribute of the state, with the value (and tensors) it had when the step was recorded."""

    def __init__(self, owner, name: str):
        self.owner, self.name = owner, name
        self.value = getattr(owner, name)
        self.tensors, self.shape = flatten(self.value)

    def __repr__(self) -> str:
        return f"{type(self.owner).__name__}.{self.name}"


def slots(roots) -> list[Slot]:
    """The step's state: the attributes each root names in its ``STATE`` (what a step reads and
    replaces, or the batch replaces between steps), and those of the objects of ours they hold."""
    out, seen, todo = [], set(), list(roots)
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        for name in getattr(obj, "STATE", ()):
            out.append(Slot(obj, name))
            if _ours(getattr(obj, name)):
                todo.append(getattr(obj, name))
    return out


def _attributes(roots) -> dict[tuple[int, str], tuple[object, object]]:
    """Every attribute of the roots and of the objects of ours they reach: (object id, name) ->
    (object, value), to catch a step that replaces an attribute its owner does not declare."""
    out, seen, todo = {}, set(), list(roots)
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        for name, value in vars(obj).items():
            out[id(obj), name] = obj, value
            if _ours(value):
                todo.append(value)
    return out


def _undeclared(before: dict, roots, declared: list[Slot]) -> str | None:
    """The first attribute of an object the step found that it replaced and that is not state
    (None: none; an object the step made is the value of a state attribute, whole)."""
    state = {(id(s.owner), s.name) for s in declared}
    existed = {key[0] for key in before}
    for key, (obj, value) in _attributes(roots).items():
        if key not in state and key[0] in existed and (key not in before or before[key][1] is not value):
            return f"{type(obj).__name__}.{key[1]}"
    return None


class Record:
    """The step recorded on one state: its slots, a static buffer for its ``running`` argument,
    and the graph."""

    def __init__(self, step: Callable, roots, fl, cache, running: torch.Tensor, recorder):
        self.slots = slots(roots)
        self.running = running.clone()
        self.graph = recorder
        before = _attributes(roots)

        def closed():
            out = step(fl, cache, self.running)
            undeclared = _undeclared(before, roots, self.slots)
            if undeclared is not None:
                raise RuntimeError(
                    f"the step replaced {undeclared}, which its owner's STATE does not name; a graph replay cannot"
                )
            self._close()
            return out

        with recorded():
            self.result = recorder.record(closed)

    def _changes(self) -> tuple[list, Slot | None]:
        """The (recorded, current) tensor pairs that differ, and the first slot whose value no
        longer has its recorded shape (None: every slot still fits its buffers)."""
        pairs = []
        for s in self.slots:
            value = getattr(s.owner, s.name)
            if value is s.value and not isinstance(value, (list, dict)):
                continue  # the same tensor, tuple or object (an object's attributes are slots of their own)
            tensors, shape = flatten(value)
            if shape != s.shape:
                return [], s
            pairs += [(o, n) for o, n in zip(s.tensors, tensors, strict=True) if o is not n]
        return pairs, None

    def _adopt(self, pairs: list) -> None:
        """Copy each current tensor into its recorded buffer and point the attributes back. A current
        tensor that lives in a state buffer (a swap, a view) is read before any buffer is written."""
        held = {o.untyped_storage().data_ptr() for s in self.slots for o in s.tensors}
        pairs = [(o, n.clone() if n.untyped_storage().data_ptr() in held else n) for o, n in pairs]
        for o, n in pairs:
            o.copy_(n)
        for s in self.slots:
            if getattr(s.owner, s.name) is not s.value:
                setattr(s.owner, s.name, s.value)

    def _close(self) -> None:
        """At the end of the recorded step: what the step replaced goes into what it replaced."""
        pairs, misfit = self._changes()
        if misfit is not None:
            raise RuntimeError(f"the step changed {misfit!r} beyond its tensors' values; a graph replay cannot")
        self._adopt(pairs)

    def bind(self, running: torch.Tensor) -> bool:
        """Before a replay: copy in the state the host replaced since the last step; False when it no
        longer fits (another shape), in which case nothing was changed."""
        pairs, misfit = self._changes()
        if misfit is not None or running.shape != self.running.shape:
            return False
        self._adopt(pairs)
        self.running.copy_(running)
        return True


class Replayed:
    """``step(fl, cache, running)`` replayed from its record; ``roots(fl, cache)`` names the
    objects whose attributes are the state. One record at a time: a decode's state objects are its
    own, so a new decode or batch size records anew (after one step run as it is)."""

    def __init__(self, step: Callable, roots: Callable, recorder: type):
        self.step, self.roots, self.recorder = step, roots, recorder
        self.record: Record | None = None
        self.key: tuple | None = None
        self.warm = True  # the next step runs as it is
        self.capture_time = 0.0  # seconds in warm steps and recordings (synced), for steady-state timings

    def __call__(self, fl, cache, running: torch.Tensor) -> torch.Tensor:
        roots = self.roots(fl, cache)
        key = tuple(map(id, roots))
        if self.record is not None:
            if self.key == key and self.record.bind(running):
                self.record.graph.replay()
                return self.record.result
            self.record, self.warm = None, True  # frees the last record's pool before a new one is made
        sync(running.device)
        t0 = time.perf_counter()
        if self.warm:
            self.warm = False
            with recorded():
                out = self.recorder().warm(lambda: self.step(fl, cache, running))
        else:
            self.record, self.key = Record(self.step, roots, fl, cache, running, self.recorder()), key
            out = self.record.result
        sync(running.device)
        self.capture_time += time.perf_counter() - t0
        return out
