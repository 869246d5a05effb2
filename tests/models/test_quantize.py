"""Weight-only quantization (``--quantize``, torchao) and the memory plan made before weights load."""

import json
import os
import subprocess
import sys
import warnings

import pytest
import torch
from click.testing import CliRunner

from jacobigen import ConfigError
from jacobigen.cli import main
from jacobigen.core.quantize import check_mode, quantize_model, quantized_as, weight_bytes
from jacobigen.models import load_bundle, memory, shapes
from jacobigen.models.releases import RELEASES
from jacobigen.models.transformer import Transformer, TransformerConfig
from tests.helpers.need import need

need("torchao")

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def tiny(tie: bool = False, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    cfg = TransformerConfig(vocab_size=300, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, tie_embeddings=tie)
    return Transformer(cfg).randomize_().eval()


@pytest.mark.parametrize("tie", [False, True])
def test_int8_quantizes_the_linear_layers_and_the_plan_counts_their_bytes(tie):
    model = tiny(tie)
    shape = memory.from_config(model.config, "tiny", 0)
    assert weight_bytes(model) == memory.weight_bytes(shape, torch.float32)
    quantize_model(model, "int8")
    assert quantized_as(model) == "int8"
    kinds = {type(m.weight).__name__ for m in model.modules() if isinstance(m, torch.nn.Linear)}
    assert kinds == ({"Int8Tensor", "Parameter"} if tie else {"Int8Tensor"})  # a tied head stays the embedding
    embeds = [m for m in model.modules() if isinstance(m, torch.nn.Embedding)]
    assert embeds and all(type(m.weight) is torch.nn.Parameter for m in embeds)  # embeddings keep their dtype
    assert weight_bytes(model) == memory.weight_bytes(shape, torch.float32, "int8")
    assert quantize_model(model, "int8") is model  # again in its own mode: nothing to do


def test_int4_off_cuda_and_unknown_modes_are_config_errors():
    with pytest.raises(ConfigError, match="int4 needs a CUDA device.*use --quantize int8"):
        load_bundle("random", "cpu", quantize="int4")
    with pytest.raises(ConfigError, match="quantize must be one of int8, int4"):
        load_bundle("random", "cpu", quantize="int2")
    res = CliRunner().invoke(main, ["generate", "red heart", "--quantize", "int4", "--device", "cpu"])
    assert res.exit_code == 2 and "int4 needs a CUDA device" in res.output and "Traceback" not in res.output


def test_no_device_means_the_device_a_model_loads_on(monkeypatch):
    """check_mode(mode, None) judges the default device, as load_bundle's device=None loads on it."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert check_mode("int4", None) == "int4"  # CUDA would be picked: int4 is fine there
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="int4 needs a CUDA device"):
        check_mode("int4", None)


def test_embedded_model_decodes_end_to_end_in_int8_and_records_it(tmp_path):
    res = CliRunner().invoke(
        main,
        ["generate", "red heart", "--quantize", "int8", "--method", "scd-mc", "--window", "16", "--no-progress"]
        + ["--out", str(tmp_path / "h.png"), "--stats", str(tmp_path / "s.json"), "--device", "cpu"],
    )
    assert res.exit_code == 0, res.output
    assert "weights int8 (the target is the quantized model)" in res.output
    assert json.loads((tmp_path / "s.json").read_text())["quantize"] == "int8"
    assert (tmp_path / "h.png").stat().st_size > 0


def test_generate_quantizes_in_place_and_bench_records_it():
    from jacobigen.tools.threads import environment

    bundle = load_bundle("random", "cpu")
    plain = weight_bytes(bundle.model)
    gen, images = bundle.generate(["red heart"], method="scd-gs", window=8, seed=0, quantize="int8")
    assert gen.stats.quantize == "int8" and len(images) == 1
    assert weight_bytes(bundle.model) < plain / 2
    assert environment(bundle.model)["quantize"] == "int8"  # what bench.json records


def test_deterministic_tokens_are_batch_invariant_on_int8_weights():
    """core.invariant probes the quantized kernel (a plan per weight type), not the float one."""
    bundle = load_bundle("random", "cpu", quantize="int8")
    texts, seeds = ["red heart", "blue car", "sun"], [3, 4, 5]
    batch, _ = bundle.generate(texts, method="scd-mc", window=8, seed=seeds, deterministic=True)
    for i, text in enumerate(texts):
        alone, _ = bundle.generate([text], method="scd-mc", window=8, seed=[seeds[i]], deterministic=True)
        assert torch.equal(alone.tokens[0], batch.tokens[i])


def test_tiny_families_decode_in_int8():
    """Our decoder as Chameleon converts into it, Janus's own image head around it, and LlamaGen's
    own modules: every linear layer quantized, every lossless decode still gives image ids."""
    need("transformers")
    from jacobigen.models.families.chameleon import chameleon_pipeline
    from jacobigen.models.families.janus import janus_pipeline
    from jacobigen.models.families.llamagen import llamagen_pipeline
    from tests.helpers import family_models as fm

    hf, tok = fm.chameleon()
    jhf, jtok = fm.janus()
    pipes = [
        chameleon_pipeline(hf, tok, size=64),
        janus_pipeline(jhf, jtok),
        llamagen_pipeline(fm.llamagen("c2i"), fm.tiny_vq(64, l2_norm=True)),
    ]
    for pipe in pipes:
        quantize_model(pipe.model, "int8")
        assert quantized_as(pipe.model) == "int8"
        prompt = "3" if pipe.name.startswith("llamagen") else "a red fox"
        for method in ("ar", "scd-mc+pac"):
            gen, _ = pipe.generate([prompt], method=method, window=6, seed=0)
            lo, hi = pipe.layout.image_ids
            assert gen.stats.quantize == "int8"
            assert bool(((gen.grid >= lo) & (gen.grid < hi)).all())


@pytest.mark.slow
def test_compiled_step_on_int8_weights_equals_eager():
    bundle = load_bundle("random", "cpu", quantize="int8")
    eager, _ = bundle.generate(["red heart"], method="scd-mc", window=8, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a fallback to the eager step would warn
        warnings.filterwarnings("ignore", message=".*(_stable_hash_for_caching|script_method).*")
        compiled, _ = bundle.generate(["red heart"], method="scd-mc", window=8, seed=0, compile=True)
    assert torch.equal(eager.tokens, compiled.tokens)


# --- the memory plan ---------------------------------------------------------------------------------


def test_the_7b_plan_holds_half_the_bytes_at_int8_and_about_a_quarter_at_int4():
    shape = shapes.named("lumina-mgpt-7b")
    assert 7.0e9 < shape.parameters < 7.05e9
    bf16, int8, int4 = (memory.weight_bytes(shape, torch.bfloat16, q) for q in (None, "int8", "int4"))
    assert bf16 == 2 * shape.parameters
    assert 0.5 < int8 / bf16 < 0.53 and 0.25 < int4 / bf16 < 0.3


def test_plan_shrinks_a_default_batch_and_refuses_a_given_one():
    shape = shapes.named("anole-7b")
    free = memory.plan(shape, device="cuda", free=None).peak_loading + 2**33
    auto = memory.fitting(shape, None, 64, device="cuda", free=free)
    assert auto.fits and 1 < auto.batch < 64
    given = memory.plan(shape, batch=64, device="cuda", free=free)
    assert not given.fits and "a smaller --batch-size" in given.refusal()


def run(*args, memory_limit=None):
    env = dict(ENV, **({"JACOBIGEN_DEVICE_MEMORY": memory_limit} if memory_limit else {}))
    return subprocess.run(
        [sys.executable, "-m", "jacobigen.cli", *args], capture_output=True, text=True, env=env, timeout=300
    )


def test_a_plan_that_does_not_fit_exits_2_with_its_figures_before_loading(tmp_path):
    out = tmp_path / "x.png"
    args = ["generate", "red heart", "--window", "16", "--device", "cpu", "--dtype", "float32", "--out", str(out)]
    res = run(*args, memory_limit="40MiB")
    assert res.returncode == 2, res.stderr
    line = res.stderr.strip()
    assert line.count("\n") == 0 and "Traceback" not in line
    for piece in ("does not fit on cpu", "weights 35.1 MiB (float32)", "KV cache", "40.0 MiB is free"):
        assert piece in line
    assert "--quantize int8" in line and "--window" in line
    assert not out.exists()
    res = run("generate", "red heart", "--window", "16", "--device", "cpu", "--quantize", "int8", "--dry-run")
    assert res.returncode == 0 and "weights int8" in res.stdout and ": fits" in res.stdout


def test_dry_run_prints_the_plan_and_loads_nothing(tmp_path):
    res = CliRunner(env={"JACOBIGEN_DEVICE_MEMORY": "2GiB"}).invoke(
        main, ["generate", "red heart", "--dry-run", "--window", "32", "--out", str(tmp_path / "x.png")]
    )
    assert res.exit_code == 0, res.output
    assert "memory plan: default on" in res.output and "of 2.0 GiB free" in res.output
    assert not (tmp_path / "x.png").exists()


def test_a_clip_is_planned_before_loading(tmp_path):
    out = tmp_path / "x.gif"
    res = run("generate-video", "sun", "--device", "cpu", "--out", str(out), memory_limit="1MiB")
    assert res.returncode == 2 and "does not fit on cpu" in res.stderr and "Traceback" not in res.stderr
    assert not out.exists()
    res = CliRunner(env={"JACOBIGEN_DEVICE_MEMORY": "2GiB"}).invoke(
        main, ["generate-video", "sun", "--dry-run", "--out", str(out)]
    )
    assert res.exit_code == 0 and "memory plan: emoji-names-video on" in res.output and not out.exists()


def test_plan_command_prints_the_table_of_shapes():
    res = CliRunner().invoke(main, ["plan", "--shape", "all", "--table", "--device", "cuda"])
    assert res.exit_code == 0, res.output
    assert "| `lumina-mgpt-7b` | 7.01 B | 64 + 2,353 | 13.1 GiB | 6.8 GiB | 3.8 GiB |" in res.output
    assert len([line for line in res.output.splitlines() if line.startswith("| `")]) == len(RELEASES)
    res = CliRunner().invoke(main, ["plan", "--shape", "lumina-mgpt-7b", "--quantize", "int8", "--device", "cpu"])
    assert res.exit_code == 0 and "weights int8" in res.output
    assert CliRunner().invoke(main, ["plan", "--shape", "gpt-9"]).exit_code == 2


@pytest.mark.slow
def test_a_7b_shape_decoder_measures_what_the_plan_counts():
    """Lumina-mGPT-7B's decoder with one of its 32 blocks built for real at bf16 (random weights) and
    quantized to int8; the block counted 32 times (a whole 7B model would hold 13 GiB here)."""
    from dataclasses import replace

    from jacobigen.models.families.chameleon import lumina_7b_config

    cfg = lumina_7b_config()
    torch.manual_seed(0)
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # never a float32 copy of 3 GB
    try:
        model = Transformer(replace(cfg, n_layers=1)).eval()
    finally:
        torch.set_default_dtype(before)

    def measured() -> int:
        return weight_bytes(model) + (cfg.n_layers - 1) * weight_bytes(model.layers[0])

    shape = shapes.named("lumina-mgpt-7b")
    bf16 = measured()
    assert bf16 == memory.weight_bytes(shape, torch.bfloat16) == 14_027_333_632  # 13.06 GiB
    quantize_model(model, "int8")
    assert measured() == memory.weight_bytes(shape, torch.bfloat16, "int8") == 7_290_019_840  # 6.79 GiB
    assert 0.51 < measured() / bf16 < 0.53
