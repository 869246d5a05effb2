"""``--dtype`` on the command line: refused before torch when it is not one, recorded in ``--stats``,
and planned at the dtype the loader will use."""

import json
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner

from jacobigen.cli import main
from jacobigen.models import embedded as E
from tests.helpers.need import need


def run(*args):
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("command", ["generate", "generate-video", "bench", "serve", "plan"])
def test_every_command_that_loads_or_plans_a_model_takes_dtype(command):
    out = run(command, "--help")
    assert out.exit_code == 0 and "--dtype [float32|bfloat16|float16]" in out.output


def test_a_dtype_that_is_not_one_is_refused_before_torch_loads():
    code = "import sys; from jacobigen.cli import main; sys.argv[1:] = ['generate', 'x', '--dtype', 'float64']\n"
    code += "try:\n    main()\nexcept SystemExit as e:\n    print(e.code, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["2", "False"] and "'float64' is not one of" in out.stderr


def test_stats_record_the_dtype(tmp_path):
    stats = tmp_path / "s.json"
    args = ["generate", "heart", "--model", "random", "--dtype", "bfloat16", "--method", "scd-mc", "--window", "16"]
    out = run(*args, "--stats", str(stats), "--no-progress", "--out", str(tmp_path / "a.png"))
    assert out.exit_code == 0, out.output
    assert json.loads(stats.read_text())["dtype"] == "bfloat16"


@pytest.mark.parametrize(
    ("args", "weights"),
    [
        (["--shape", "anole-7b"], "weights bfloat16"),  # a family checkpoint: bf16 as released, on the CPU too
        (["--shape", "anole-7b", "--dtype", "float32"], "weights float32"),
        (["--model", "default"], f"weights {E.DTYPE}"),  # a CPU without native bf16
        (["--model", "default", "native-bf16"], f"weights {E.NATIVE_BF16_DTYPE}"),
        (["--model", "default", "--device", "cuda"], f"weights {E.DTYPE}"),  # what the loader uses there too
        (["--model", "default", "--dtype", "bfloat16"], "weights bfloat16"),
    ],
)
def test_the_plan_counts_the_dtype_the_loader_uses(monkeypatch, args, weights):
    from jacobigen.models import load

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    native = "native-bf16" in args
    monkeypatch.setattr(load, "native_bf16", lambda: native)
    args = [a for a in args if a != "native-bf16"]
    out = run("plan", *args)
    assert out.exit_code == 0, out.output
    assert out.output.splitlines()[0].endswith(weights)


def test_int4_with_another_dtype_is_refused_before_loading(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = run("plan", "--shape", "anole-7b", "--quantize", "int4", "--device", "cuda", "--dtype", "float32")
    assert out.exit_code == 2 and "--quantize int4 runs in bfloat16" in out.output


def test_serve_loads_the_model_in_its_dtype():
    need("fastapi")  # the serve extra
    from jacobigen.serve.app import Settings
    from jacobigen.serve.server import load

    assert load("random", Settings(threads=1, dtype="bfloat16")).dtype == "bfloat16"
