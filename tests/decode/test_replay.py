"""The step replayed from a recorded graph (docs/DESIGN.md §7), on the CPU through OpReplay, the
CUDA graph's stand-in: ATen ops replayed on the tensors they were recorded with, no Python of ours.
Presets that together combine every pair of parts (tests/helpers/presets.py) give eager's tokens
with rows refilled and compacted; a step that keeps Python state or reads the device is refused
while recording; without the copy-back the tokens go wrong."""

from contextlib import nullcontext

import pytest
import torch

from jacobigen import METHODS
from jacobigen.core.recording import recorded
from jacobigen.decode import replay
from jacobigen.decode.replay import OpReplay, Record
from tests.decode.test_capture import _run
from tests.helpers.models import random_model
from tests.helpers.presets import covering

FAST = ["ar"]  # the fast tier replays the plain chain; the slow tier presets that meet every pair of parts
SLOW = covering([m for m in METHODS if m not in FAST])


@pytest.fixture
def counts(monkeypatch):
    seen = {"records": 0, "replays": 0}
    record, again = OpReplay.record, OpReplay.replay

    def counted_record(self, fn):
        seen["records"] += 1
        return record(self, fn)

    def counted_replay(self):
        seen["replays"] += 1
        return again(self)

    monkeypatch.setattr(OpReplay, "record", counted_record)
    monkeypatch.setattr(OpReplay, "replay", counted_replay)
    return seen


def check_replayed(method: str, counts) -> None:
    model = random_model()
    kw = dict(batch_size=2)  # the third sequence refills a row; then the batch is compacted to one row
    # PJD's eager block holds only the segments in flight; its recorded block keeps every segment
    # slot (masked). The law is the same, but a kernel may round a wider matmul otherwise (an AMD
    # EPYC does), so the replay is held to eager on the static path, the computation it recorded.
    with recorded() if method.startswith("pjd") else nullcontext():
        eager = _run(model, method, [5, 6, 7], **kw)
    with replay.on_cpu():
        replayed = _run(model, method, [5, 6, 7], **kw)
    assert torch.equal(replayed.tokens, eager.tokens)
    assert replayed.stats.nfe == eager.stats.nfe and replayed.stats.committed == eager.stats.committed
    # one record per batch shape (2 rows, then 1); every other step but the warm ones is a replay
    assert counts["records"] <= 2 and counts["replays"] >= eager.stats.nfe - 3 - 2 * counts["records"]


@pytest.mark.parametrize("method", FAST)
def test_replayed_step_gives_eager_tokens(method, counts):
    check_replayed(method, counts)


@pytest.mark.slow
@pytest.mark.parametrize("method", SLOW)
def test_presets_of_every_pair_of_parts_replay(method, counts):
    check_replayed(method, counts)


def test_without_the_copy_back_a_replay_goes_wrong(monkeypatch):
    """The mutant: replaced state is pointed back but not copied, so each replay restarts from the
    recorded state."""

    def close_without_copy(self):
        for s in self.slots:
            if getattr(s.owner, s.name) is not s.value:
                setattr(s.owner, s.name, s.value)

    monkeypatch.setattr(Record, "_close", close_without_copy)
    model = random_model()
    eager = _run(model, "scd-mc", [5])
    with replay.on_cpu():
        replayed = _run(model, "scd-mc", [5])
    assert not torch.equal(replayed.tokens, eager.tokens)


def test_a_step_that_keeps_python_state_is_refused(monkeypatch):
    from jacobigen.decode.chain import Chain

    segments = Chain.segments

    def counting(self, *args):
        self.calls = getattr(self, "calls", 0) + 1
        return segments(self, *args)

    monkeypatch.setattr(Chain, "segments", counting)
    with replay.on_cpu(), pytest.raises(RuntimeError, match=r"replaced Chain\.calls, which its owner's STATE"):
        _run(random_model(), "sjd", [1])


def test_state_a_part_does_not_declare_is_refused(monkeypatch):
    """The replay keeps only the declared STATE in place: a part that leaves out a tensor it replaces
    (the chain's accepted-run counter) is caught while recording, not replayed stale."""
    from jacobigen.decode.chain import Chain

    monkeypatch.setattr(Chain, "STATE", tuple(n for n in Chain.STATE if n != "step"))
    with replay.on_cpu(), pytest.raises(RuntimeError, match=r"replaced Chain\.step"):
        _run(random_model(), "sjd", [1])


def test_a_step_that_reads_the_device_is_refused(monkeypatch):
    from jacobigen.decode.chain import Chain

    segments = Chain.segments

    def reading(self, fl, *args):
        int(fl.committed.sum())
        return segments(self, fl, *args)

    monkeypatch.setattr(Chain, "segments", reading)
    with replay.on_cpu(), pytest.raises(RuntimeError, match="reads the device"):
        _run(random_model(), "sjd", [1])


def test_op_replay_runs_the_recorded_ops_on_the_recorded_tensors():
    state = torch.zeros(3)
    step = torch.tensor([1.0, 2.0, 3.0])
    graph = OpReplay()
    out = graph.record(lambda: state.add_(step).mul(2))
    assert torch.equal(out, torch.tensor([2.0, 4.0, 6.0]))
    step.copy_(torch.tensor([10.0, 0.0, 0.0]))  # an input buffer written between replays
    graph.replay()
    assert torch.equal(state, torch.tensor([11.0, 2.0, 3.0])) and torch.equal(out, 2 * state)
