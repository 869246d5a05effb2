"""``jacobigen plan`` and ``generate --dry-run`` never need a GPU, refuse what ``generate`` refuses,
and print figures whose words match them (the newcomer findings of issues 58 and 61)."""

from dataclasses import replace

import pytest
import torch
from click.testing import CliRunner

from jacobigen.cli import main
from jacobigen.core.errors import ConfigError
from jacobigen.core.limits import MEMORY_ENV, memory_override
from jacobigen.models import memory, shapes
from jacobigen.models.releases import RELEASES


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


@pytest.mark.parametrize("name", [n for n, r in RELEASES.items() if r.family not in ("llamagen", "cosmos")])
def test_a_named_shape_is_the_one_its_release_folder_plans(name, tmp_path):
    """`plan --shape NAME` and `plan --model FAMILY:DIR` of the release's config.json read one config
    through one reader: the shapes agree field by field (the image decoder aside: the folder here has
    no VQ file, so its images would be palettes; a named plan weighs Lumina-mGPT 2.0's MoVQGAN-270M,
    built on the meta device, and counts every release's pixel decode)."""
    import json

    from jacobigen.models.families import FAMILIES

    release = RELEASES[name]
    if release.family in ("janus", "emu3"):
        from transformers import Emu3Config, JanusConfig

        (JanusConfig if release.family == "janus" else Emu3Config)(**release.config).save_pretrained(tmp_path)
        weights = {"lm_head.weight": "model-00001-of-00001.safetensors"}
        (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weights}))
    else:
        (tmp_path / "config.json").write_text(json.dumps(release.config))
    family = next(k for k, v in FAMILIES.items() if v == release.family)
    folder = shapes.shape_of(f"{family}:{tmp_path}?size={release.size}")
    ours = shapes.named(name)
    assert replace(folder, name=name, note=ours.note, decoder=ours.decoder, image_decode=ours.image_decode) == ours
    assert (ours.decoder > 0) == (release.family == "lumina2")
    side = {"janus": 384, "anole": 512}.get(release.family, release.size)
    assert ours.image_decode == shapes.PIXEL_BYTES[release.family] * side**2  # one image's pixels, planned
    assert folder.image_decode == (ours.image_decode if release.family in ("janus", "emu3") else 0)  # no VQ file


def test_lumina2_int8_at_768_px_fits_a_24_gib_card_load_peak_included():
    p = memory.plan(shapes.named("lumina2-7b"), device="cuda", dtype=torch.bfloat16, quantize="int8", window=32,
                    free=24 * 2**30)  # fmt: skip
    assert p.shape.image_tokens == 96 * 97 + 1 and p.rows == 2
    assert p.fits, p.text()
    assert max(p.total, p.peak_loading) <= 24 * 2**30


def test_the_pixel_decode_costs_are_the_measured_ones():
    """shapes.PIXEL_BYTES is benchmarks/scale/image_decode.json's figure for each family's decoder."""
    import json
    from pathlib import Path

    measured = json.loads((Path(__file__).resolve().parents[2] / "benchmarks/scale/image_decode.json").read_text())
    decoders = {"lumina2": "movqgan-270m", "chameleon": "chameleon-vqgan", "anole": "chameleon-vqgan",
                "janus": "janus-vq", "llamagen": "llamagen-vq16", "emu3": "emu3-vq"}  # fmt: skip
    assert set(decoders) == set(shapes.PIXEL_BYTES)
    for family, decoder in decoders.items():
        assert shapes.PIXEL_BYTES[family] == measured["decoders"][decoder]["bytes_per_pixel"], family


@pytest.mark.parametrize(
    "args, rows",
    [([], "1 rows = 1 sequence(s);"), (["--cfg", "3"], "2 rows = 1 sequence(s) x 2 for CFG"),
     (["--model", "emoji"], "2 rows = 1 sequence(s) x 2 for CFG"), (["--model", "emoji", "--cfg", "1"], "1 rows =")],
)  # fmt: skip
def test_the_plan_counts_the_cfg_rows_the_models_own_sampling_runs(args, rows):
    """The default samples at cfg 1 (one model row an image), `emoji` at cfg 3 (the CFG pair)."""
    out = run("generate", "red heart", *args, "--dry-run")
    assert out.exit_code == 0 and rows in out.output, out.output
