"""The step as one compiled graph (docs/DESIGN.md §7): no graph break, one graph per block shape, a
second image compiles nothing new, and the tokens are eager's. Backend ``eager`` traces exactly what
inductor would compile (the graph breaks and guards are dynamo's) without generating code; one slow
test runs inductor itself."""

import pytest
import torch
from click.testing import CliRunner

from jacobigen import METHODS, ConfigError, generate
from jacobigen.cli import main
from jacobigen.core.kernels import cumsum
from jacobigen.decode.capture import Graphed, compile_counts
from jacobigen.models import random_bundle
from jacobigen.tools.bench import run_compiled_bench
from tests.helpers.models import LAYOUT, PROMPT, UNCOND, random_model
from tests.helpers.presets import covering

FAST = ["ar", "scd-mc"]  # the chain and coupling; the tree and PJD's rows (seconds each) run in the slow tier
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
    model = random_model()
    assert torch.equal(_run(Graphed(model), "sjd", [1]).tokens, _run(model, "sjd", [1]).tokens)


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
    by = {r.method: r for r in rows}
    assert by["sjd-pac"].compile_error == "RuntimeError: ValueError: not comparable" and by["sjd-pac"].runs == 0
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


def test_a_step_that_fails_to_compile_falls_back_to_eager_with_a_warning(monkeypatch):
    """A compile error (inductor cannot build a kernel on some device) is raised before the graph
    runs: the engine warns once and decodes on with the eager step, the tokens eager's."""
    from jacobigen.decode import engine

    def broken(step, how):
        def fail(*args):
            raise torch._dynamo.exc.TorchDynamoException("inductor found no kernel for this device")

        return fail

    model = random_model()
    eager = _run(model, "scd-mc", [3]).tokens
    monkeypatch.setattr(engine, "captured", broken)
    with pytest.warns(UserWarning, match="the compiled step failed to build"):
        fallen = _run(model, "scd-mc", [3], compile=True).tokens
    assert torch.equal(fallen, eager)


def test_deterministic_compiles_to_one_graph_with_its_own_eager_tokens():
    torch._dynamo.reset()
    model = random_model()
    eager = _run(model, "scd-mc", [3], deterministic=True).tokens
    before = compile_counts()
    compiled = _run(model, "scd-mc", [3], compile="eager", deterministic=True).tokens
    assert compile_counts()["graph_breaks"] == before["graph_breaks"]
    assert torch.equal(compiled, eager)
