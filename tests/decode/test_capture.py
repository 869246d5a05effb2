"""The step as one compiled graph (docs/DESIGN.md §7): no graph break, one graph per block shape, a
second image compiles nothing new, and the tokens are eager's. Backend ``eager`` traces exactly what
inductor would compile (the graph breaks and guards are dynamo's) without generating code; one slow
test runs inductor itself."""

import json
import warnings

import pytest
import torch
from click.testing import CliRunner

from jacobigen import METHODS, ConfigError, generate
from jacobigen.cli import main
from jacobigen.core.kernels import cumsum
from jacobigen.core.layout import ImageLayout
from jacobigen.core.masks import block_mask, causal
from jacobigen.decode.capture import CAPTURERS, Graphed, GraphFallback, compile_counts, forward_of
from jacobigen.decode.replay import OpReplay
from jacobigen.models import random_bundle
from jacobigen.tools.bench import run_compiled_bench
from tests.helpers.models import CODES, LAYOUT, PROMPT, UNCOND, random_model
from tests.helpers.presets import covering

# the chain, coupling and the invariant verifier; the tree and PJD's rows (seconds each) run in the slow tier
FAST = ["ar", "scd-mc", "scd-gs+invariant"]
# and presets that meet every pair of parts (tests/helpers/presets.py), the full tree and the frame copy
SLOW = covering([m for m in METHODS if m not in FAST]) + ["sjd-pac[tree_budget=full]", "scd-gs+copy"]


def _run(model, method: str, seed, compile=False, **kw):
    name, opts = method.split("[")[0], {}
    if "[" in method:
        opts = dict(kv.split("=") for kv in method[len(name) + 1 : -1].split(","))
    return generate(
        model, PROMPT, layout=LAYOUT, uncond=UNCOND, cfg=3.0, top_k=64, method=name, window=32, seed=seed,
        compile=compile, **opts, **kw,
    )  # fmt: skip


def check_compiled(method: str) -> None:
    torch._dynamo.reset()  # a preset whose parts an earlier test compiled would reuse that graph
    model = random_model()
    eager = _run(model, method, [3])
    before = compile_counts()
    first = _run(model, method, [3], compile="eager")
    middle = compile_counts()
    second = _run(model, method, [4], compile="eager")
    after = compile_counts()
    assert torch.equal(first.tokens, eager.tokens)
    assert first.stats.nfe == eager.stats.nfe and first.stats.committed == eager.stats.committed
    assert torch.equal(second.tokens, _run(model, method, [4]).tokens)
    assert after["graph_breaks"] == before["graph_breaks"]
    assert middle["graphs"] - before["graphs"] == 1  # one block shape: one graph
    assert after["graphs"] == middle["graphs"]  # the next image reuses it


@pytest.mark.parametrize("method", FAST)
def test_compiled_step_is_one_graph_with_eager_tokens(method):
    check_compiled(method)


@pytest.mark.slow
@pytest.mark.parametrize("method", SLOW)
def test_presets_of_every_pair_of_parts_compile_to_one_graph(method):
    check_compiled(method)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["sjd-pac", "pjd+scd-mc+pac"])
def test_compiled_batch_with_refill_keeps_each_sequences_tokens(method):
    """Rows finish, are refilled, then compacted: one graph per batch size (2, then 1), tokens unchanged."""
    model = random_model()
    kw = dict(batch_size=2)
    eager = _run(model, method, [5, 6, 7], **kw)
    before = compile_counts()["graphs"]
    compiled = _run(model, method, [5, 6, 7], compile="eager", **kw)
    middle = compile_counts()["graphs"]
    again = _run(model, method, [5, 6, 7], compile="eager", **kw)
    assert torch.equal(compiled.tokens, eager.tokens) and torch.equal(again.tokens, eager.tokens)
    assert middle - before <= 2 and compile_counts()["graphs"] == middle


@pytest.mark.slow
def test_inductor_compiled_step_matches_eager():
    model = random_model()
    assert torch.equal(_run(model, "scd-mc", [2], compile=True).tokens, _run(model, "scd-mc", [2]).tokens)


def test_compile_argument_is_checked():
    with pytest.raises(ConfigError, match="compile must be"):
        _run(random_model(), "sjd", [0], compile=3)


def test_graphed_model_is_the_model_off_a_gpu():
    model, graphed = random_model(), Graphed(random_model())
    assert torch.equal(_small(graphed, "sjd", [1]).tokens, _small(model, "sjd", [1]).tokens)
    assert graphed.captures == 0 and graphed.status == "eager"  # the CPU records no graphs unless emulated


# --- the graphed forward, CUDA graphs' logic on the CPU: OpReplay records each forward's ATen ops on its static
# buffers and replays them there, so a buffer the wrapper forgot to refresh replays stale inputs ------------------

SMALL = ImageLayout(6, 8, (0, CODES), eol_id=CODES, end_id=CODES + 1)  # 55 tokens: the replays are Python


class Counted(OpReplay):
    """The stand-in, counting its recordings and replays."""

    records = replays = 0

    def record(self, fn):
        Counted.records += 1
        return super().record(fn)

    def replay(self) -> None:
        Counted.replays += 1
        super().replay()


class Broken(OpReplay):
    """A stand-in that fails where a device may: ``Broken.at`` names the call that raises."""

    at = "record"

    def warm(self, fn):
        self._fail("warm")
        return super().warm(fn)

    def record(self, fn):
        self._fail("record")
        return super().record(fn)

    def replay(self) -> None:
        self._fail("replay")
        super().replay()

    def _fail(self, where: str) -> None:
        if where == Broken.at:
            raise RuntimeError(f"operation not permitted when stream is capturing ({where})")


def _small(model, method: str, seed, **kw):
    return generate(
        model, PROMPT, layout=SMALL, uncond=UNCOND, cfg=3.0, top_k=64, method=method, window=16, seed=seed, **kw
    )  # fmt: skip


@pytest.mark.parametrize("method", ["ar", "scd-mc", "sjd-pac"])
def test_the_default_graphed_forward_gives_eager_tokens(method, monkeypatch):
    """Where the device records graphs (CUDA; here the CPU through the stand-in) every decode runs graphed by
    default, with eager's tokens; ``cuda_graphs=False`` runs it eagerly."""
    model = random_model()
    eager = _small(model, method, [3, 4], batch_size=1)  # a refill: a second cache's graphs
    monkeypatch.setitem(CAPTURERS, "cpu", Counted)
    monkeypatch.setattr(Counted, "replays", 0)
    graphed = _small(model, method, [3, 4], batch_size=1)
    assert torch.equal(graphed.tokens, eager.tokens) and graphed.stats.nfe == eager.stats.nfe
    assert graphed.stats.forward_path == "graphed" and Counted.replays > graphed.stats.nfe // 2
    off = _small(model, method, [3, 4], batch_size=1, cuda_graphs=False)
    assert off.stats.forward_path == "eager" and torch.equal(off.tokens, eager.tokens)


def test_each_block_shape_is_captured_once_per_cache():
    """The prefill runs eagerly (it comes once), a block shape's first forward too, its second is captured and
    the rest replay; a new decode's cache gets graphs of its own, and only the newest ``CACHES`` caches' stay."""
    model = random_model()
    graphed = Graphed(model, capturer=Counted)
    first = _small(graphed, "scd-mc", [5])
    assert graphed.captures == 1 and graphed.replays == first.stats.nfe - 3
    assert torch.equal(first.tokens, _small(model, "scd-mc", [5]).tokens)
    for seed in range(6, 6 + Graphed.CACHES):
        again = _small(graphed, "scd-mc", [seed])
        assert torch.equal(again.tokens, _small(model, "scd-mc", [seed]).tokens)
    assert graphed.captures == 1 + Graphed.CACHES and len(graphed.graphs) == Graphed.CACHES


def test_a_cache_is_held_only_once_a_graph_writes_into_it():
    """A refill prefills into a cache of its own, dropped afterwards: a shape seen once holds no memory."""
    model = random_model()
    graphed = Graphed(model, capturer=Counted)
    cache = model.new_cache(2, 64)
    tokens, positions = torch.zeros(2, 3, dtype=torch.int64), torch.arange(3).expand(2, 3)
    mask = block_mask(cache.lengths, cache.capacity, causal(3, torch.device("cpu")))
    once = graphed(tokens, positions, mask, cache).clone()
    assert [held for held, _ in graphed.graphs.values()] == [[]]
    assert torch.equal(graphed(tokens, positions, mask, cache), once) and graphed.captures == 1
    assert [len(held) for held, _ in graphed.graphs.values()] == [2 * len(cache.keys)]
    assert torch.equal(graphed(tokens, positions, mask, cache), once) and graphed.replays == 1


def test_the_row_views_of_one_cache_share_its_graphs():
    """``deterministic="per-sequence"`` calls the model on each sequence's rows of the cache: more views than
    ``CACHES``, one graph each, captured once (not evicted and recaptured by each other)."""
    model, sequences = random_model(), Graphed.CACHES + 2
    graphed = Graphed(model, capturer=Counted)
    kw = dict(deterministic="per-sequence")
    out = _small(graphed, "ar", list(range(sequences)), **kw)
    assert torch.equal(out.tokens, _small(model, "ar", list(range(sequences)), **kw).tokens)
    calls = sum(out.stats.sequence_nfe)  # one model call per sequence and forward, its prefill included
    assert graphed.captures == sequences  # ar's sequences finish together: the rows are never selected
    assert graphed.replays == calls - 3 * sequences  # all but each one's prefill, first block and capture


@pytest.mark.parametrize("where", ["warm", "record", "replay"])
def test_a_graph_that_fails_falls_back_to_eager_with_one_warning(where, monkeypatch):
    """Whatever the device raises while capturing or replaying, the forward runs eagerly, with eager's tokens
    and one warning for the model however many decodes follow."""
    model = random_model()
    eager = _small(model, "scd-mc", [3]).tokens
    monkeypatch.setitem(CAPTURERS, "cpu", Broken)
    monkeypatch.setattr(Broken, "at", where)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first, second = _small(model, "scd-mc", [3]), _small(model, "scd-mc", [3])
    fallbacks = [w for w in caught if issubclass(w.category, GraphFallback)]
    assert len(fallbacks) == 1 and "operation not permitted" in str(fallbacks[0].message), caught
    assert torch.equal(first.tokens, eager) and torch.equal(second.tokens, eager)
    assert first.stats.forward_path.startswith("eager (graphs failed: RuntimeError")


@pytest.mark.parametrize("flag, path", [([], "graphed"), (["--no-cuda-graphs"], "eager")])
def test_generate_records_whether_the_forward_ran_graphed(flag, path, tmp_path, monkeypatch):
    monkeypatch.setitem(CAPTURERS, "cpu", OpReplay)
    stats = tmp_path / "s.json"
    args = ["generate", "red heart", "--model", "random", "--method", "scd-mc", "--window", "16", "--no-progress"]
    res = CliRunner().invoke(main, args + ["--out", str(tmp_path / "a.png"), "--stats", str(stats), *flag])
    assert res.exit_code == 0, res.output
    assert json.loads(stats.read_text())["forward_path"] == path


def test_an_eager_step_that_fails_raises_its_error():
    """Only a compiled step falls back: an eager step's error is the user's to see, not a compile warning."""
    from jacobigen.decode.engine import Engine

    def broken(self, fl, cache, running):
        raise RuntimeError("a bug in the step")

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeError, match="a bug in the step"), pytest.MonkeyPatch.context() as mp:
            mp.setattr(Engine, "_step", broken)
            _small(random_model(), "scd-mc", [0])


def test_the_benchs_plain_loop_is_graphed_as_the_decodes_are(monkeypatch):
    """A fair baseline (DESIGN §7): where decodes replay graphs by default, the bench's plain loop does too."""
    from jacobigen.tools import bench
    from jacobigen.tools.bench_rows import PLAIN

    monkeypatch.setitem(CAPTURERS, "cpu", OpReplay)
    pipe = random_bundle()
    run = bench.decode_one(pipe, PLAIN, 1, "red heart", 0)
    (loop,) = bench._GRAPHED.values()
    assert loop.model is pipe.model and loop.captures >= 1 and loop.status == "graphed"
    monkeypatch.delitem(CAPTURERS, "cpu")
    assert torch.equal(run.tokens, bench.decode_one(pipe, PLAIN, 1, "red heart", 0).tokens)


def test_graphs_are_asked_for_on_cuda_only_and_can_be_turned_off():
    model = random_model()
    assert isinstance(forward_of(model, torch.device("cuda"), True), Graphed)
    assert forward_of(model, torch.device("cuda"), False) is model
    assert forward_of(model, torch.device("cpu"), True) is model
    graphed = Graphed(model)
    assert forward_of(graphed, torch.device("cuda"), True) is graphed  # bench's own wrapper is kept
    with pytest.raises(ConfigError, match="cuda_graphs must be True or False"):
        _small(model, "ar", [0], cuda_graphs="no")


def test_cumsum_runs_atens_kernel_inside_a_graph():
    x = torch.rand(3, 5000, dtype=torch.float64)
    compiled = torch.compile(cumsum, backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(x), x.cumsum(-1))


@pytest.mark.slow
def test_bench_compile_rows_record_graphs_and_tokens():
    rows, extra = run_compiled_bench(
        random_bundle(), ["sjd-pac"], [8], ["red heart"], [0, 1], progress=False, compile="eager"
    )
    for r in rows:
        assert r.graph_breaks == 0 and r.recompiles == 0 and r.tokens_equal_eager, r
        assert r.graphs >= 1, r  # the plain loop compiles its forward too
    assert extra["compile"]["graph_breaks"] == 0


@pytest.mark.slow
def test_bench_keeps_the_rows_that_compile(monkeypatch):
    """A method whose step fails to compile is reported and left out; the others are timed."""
    from jacobigen.decode import engine

    real = engine.captured

    def picky(step, how):
        compiled = real(step, how)

        def call(fl, cache, running):
            if step.__self__.schedule.levels:  # the proactive tree's schedule
                raise RuntimeError("ValueError: not comparable\nlong traceback")
            return compiled(fl, cache, running)

        return call

    monkeypatch.setattr(engine, "captured", picky)
    rows, extra = run_compiled_bench(
        random_bundle(), ["sjd-pac", "scd-mc"], [32], ["red heart"], [0], progress=False, compile="eager"
    )
    by = {r.method: r for r in rows}  # the engine falls back on any error; the bench reports the row as not compiled
    assert by["sjd-pac"].compile_error.startswith("CompileFallback") and by["sjd-pac"].runs == 0
    assert by["sjd-pac"].compile_error.endswith("(RuntimeError: ValueError: not comparable")
    assert by["scd-mc"].runs == 1 and by["scd-mc"].tokens_equal_eager
    assert list(extra["compile_errors"]) == ["sjd-pac @ 32"]


@pytest.mark.slow
def test_bench_reports_a_step_that_fell_back_to_eager(monkeypatch):
    """The engine's fallback keeps `generate` going; the bench, which measures the compiled step,
    reports such a row as not compiled instead of timing the eager step under its name."""
    from jacobigen.decode import engine

    real = engine.captured

    def broken(step, how):
        def fail(*args):
            raise torch._dynamo.exc.TorchDynamoException("inductor found no kernel for this device")

        return real(step, how) if step.__self__.parts.window == 1 else fail  # ar compiles

    monkeypatch.setattr(engine, "captured", broken)
    rows, extra = run_compiled_bench(
        random_bundle(), ["scd-mc"], [16], ["red heart"], [0], progress=False, compile="eager"
    )
    (row,) = [r for r in rows if r.method == "scd-mc"]
    assert row.compile_error.startswith("CompileFallback") and row.runs == 0
    assert list(extra["compile_errors"]) == ["scd-mc @ 16"]


def test_generate_compile_refuses_job_runs(tmp_path):
    prompts = tmp_path / "p.txt"
    prompts.write_text("red heart\n")
    res = CliRunner().invoke(main, ["generate", "--compile", "--prompts", str(prompts), "--model", "random"])
    assert res.exit_code == 2 and "--compile applies to one sheet" in res.output


@pytest.mark.parametrize("error", [torch._dynamo.exc.TorchDynamoException, RuntimeError, AssertionError])
def test_a_step_that_fails_to_compile_falls_back_to_eager_with_a_warning(error, monkeypatch):
    """Whatever the compile or the first run raises (inductor cannot build a kernel on some device, a graph fails
    to capture), it is raised before the graph runs: the engine warns once and decodes on with the eager step,
    the tokens eager's."""
    from jacobigen.decode import engine

    def broken(step, how):
        def fail(*args):
            raise error("inductor found no kernel for this device")

        return fail

    model = random_model()
    eager = _run(model, "scd-mc", [3]).tokens
    monkeypatch.setattr(engine, "captured", broken)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fallen = _run(model, "scd-mc", [3], compile=True)
    assert [w.category for w in caught] == [engine.CompileFallback], caught
    assert "the compiled step failed to build" in str(caught[0].message)
    assert torch.equal(fallen.tokens, eager) and fallen.stats.forward_path == "eager"


def test_deterministic_compiles_to_one_graph_with_its_own_eager_tokens():
    torch._dynamo.reset()
    model = random_model()
    eager = _run(model, "scd-mc", [3], deterministic=True).tokens
    before = compile_counts()
    compiled = _run(model, "scd-mc", [3], compile="eager", deterministic=True).tokens
    assert compile_counts()["graph_breaks"] == before["graph_breaks"]
    assert torch.equal(compiled, eager)
