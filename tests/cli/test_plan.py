"""``jacobigen plan`` and ``generate --dry-run`` never need a GPU, refuse what ``generate`` refuses,
and print figures whose words match them (the newcomer findings of issues 58 and 61)."""

import pytest
import torch
from click.testing import CliRunner

from jacobigen.cli import main
from jacobigen.core.errors import ConfigError
from jacobigen.core.limits import MEMORY_ENV, memory_override
from jacobigen.models import memory, shapes


@pytest.fixture
def no_cuda(monkeypatch):
    """This machine as a CPU-only torch sees it (whatever this one has)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


def run(*args, env=None):
    return CliRunner().invoke(main, list(args), env=env)


def test_plan_for_a_gpu_this_machine_lacks_needs_no_gpu(no_cuda, monkeypatch):
    monkeypatch.delenv(MEMORY_ENV, raising=False)
    out = run("plan", "--shape", "lumina-mgpt-7b", "--quantize", "int4", "--device", "cuda")
    assert out.exit_code == 0, out.output
    assert "weights         3.8 GiB" in out.output and f"free memory on cuda unknown: set {MEMORY_ENV}" in out.output
    args = ["plan", "--shape", "lumina-mgpt-7b", "--quantize", "int4", "--device", "cuda:3"]
    budget = run(*args, env={MEMORY_ENV: "24GiB"})
    assert budget.exit_code == 0, budget.output
    assert "of 24.0 GiB free on cuda:3: fits" in budget.output


def test_a_dry_run_plans_for_a_gpu_this_machine_lacks(no_cuda):
    out = run("generate", "heart", "--device", "cuda", "--method", "scd-mc", "--window", "16", "--dry-run")
    assert out.exit_code == 0, out.output
    assert "memory plan: default on cuda" in out.output and "free memory on cuda unknown" in out.output


@pytest.mark.parametrize("command", [["plan", "--shape", "anole-7b"], ["generate", "heart", "--dry-run"]])
def test_a_device_that_is_not_one_lists_the_valid_ones(command):
    out = run(*command, "--device", "potato")
    assert out.exit_code == 2, out.output
    assert "--device 'potato' is not a device: use cpu, cuda, cuda:N or mps (this machine has cpu" in out.output


@pytest.mark.parametrize("command", [["plan", "--shape", "anole-7b"], ["generate", "heart", "--dry-run"]])
def test_int4_off_cuda_is_refused_by_the_plan_as_by_generate(command):
    out = run(*command, "--quantize", "int4", "--device", "cpu")
    assert out.exit_code == 2, out.output
    assert "--quantize int4 needs a CUDA device" in out.output and "fits" not in out.output


@pytest.mark.parametrize("quantize", ["int8", "int4"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_loading_line_names_the_dtype_its_figure_counts(quantize, dtype):
    shape = shapes.named("lumina-mgpt-7b")
    p = memory.plan(shape, device="cuda", dtype=dtype, quantize=quantize, free=None)
    loads = torch.bfloat16 if quantize == "int4" else dtype  # int4 runs in bf16: the weights load so
    assert p.weights == memory.weight_bytes(shape, loads, quantize)
    assert p.peak_loading == p.weights + memory.load_transient(shape, loads, quantize)
    assert f"load peak    {memory.size(p.peak_loading):>10}  (the weights + " in p.text()
    assert "its layer quantized" in p.text()


def test_a_refusal_says_quantized_only_when_something_is():
    shape = shapes.named("lumina-mgpt-7b")
    plain = memory.plan(shape, dtype=torch.bfloat16, free=2**30).refusal()
    assert "its load peaks at" in plain and "1.0 GiB is free" in plain and "quantized" not in plain
    assert "try --quantize int8" in plain  # the way to fit is named
    int8 = memory.plan(shape, dtype=torch.bfloat16, quantize="int8", free=2**30).refusal()
    assert "its load peaks at" in int8 and "--quantize int8" not in int8


def test_ar_is_planned_at_its_own_window():
    out = run("generate", "heart", "--method", "ar", "--dry-run")
    assert out.exit_code == 0, out.output
    assert "+ 273 image + 1 window tokens" in out.output


@pytest.mark.parametrize("value", ["1e400", "1e20", "99999999TiB"])
def test_a_device_memory_past_any_machine_is_a_clear_error(monkeypatch, value):
    monkeypatch.setenv(MEMORY_ENV, value)
    with pytest.raises(ConfigError, match=f"{MEMORY_ENV}='{value}': give at most"):
        memory_override()
    out = run("plan", "--shape", "anole-7b")
    assert out.exit_code == 2 and "give at most" in out.output, out.output
