"""``dtype=``: the model's dtype chosen at load, recorded where a run says what it sampled, and the
lossless methods as exact (and reproducible) in bfloat16 as in float32."""

import pytest
import torch

from jacobigen.core.errors import ConfigError
from jacobigen.models import embedded as E
from jacobigen.models import load
from jacobigen.models.load import check_dtype, default_dtype, load_bundle
from jacobigen.tools.threads import environment


@pytest.fixture(scope="module")
def bf16():
    return load_bundle("random", "cpu", dtype="bfloat16")


def test_the_random_model_loads_in_the_dtype_asked_for(bf16):
    assert bf16.dtype == "bfloat16"
    assert {p.dtype for p in bf16.model.parameters()} == {torch.bfloat16}
    assert load_bundle("random", "cpu").dtype == E.DTYPE
    assert load_bundle("random", "cpu", dtype=torch.float16).dtype == "float16"


@pytest.mark.parametrize(("method", "window"), [("ar", 1), ("scd-mc", 16), ("sjd-pac", 16)])
def test_bfloat16_decodes_reproducibly_and_records_its_dtype(bf16, method, window):
    runs = [bf16.generate(["red heart", "blue car"], method=method, window=window, seed=3)[0] for _ in range(2)]
    assert torch.equal(runs[0].tokens, runs[1].tokens)
    assert runs[0].stats.as_dict()["dtype"] == "bfloat16" and runs[0].stats.lossless
    assert ((runs[0].tokens >= 0) & (runs[0].tokens < bf16.model.vocab_size)).all()


def test_in_bfloat16_a_lossless_method_commits_ars_tokens_deterministic_and_same_as_ar(bf16):
    """What bfloat16 promises on any CPU. Its block rounds otherwise than a single token (on an Intel
    Xeon without native bf16, greedy ``scd-gs`` left ``ar``'s tokens after about 50), so without
    ``deterministic`` a lossless method keeps the distribution, not ``ar``'s tokens. In deterministic
    mode a chain's block computes every position's logits as ``ar``'s single token does (the linear
    plans and the attention's call shapes are measured on the machine that runs: core.invariant), so
    the invariant verifier commits exactly ``ar``'s tokens, sampled, not only greedy."""
    from jacobigen.core.invariant import install

    if not install(bf16.model):  # then the engine warns and runs each sequence alone: no block promise
        pytest.skip("no row-invariant plan for this machine's bfloat16 kernels")
    texts, kw = ["red heart", "blue car"], dict(seed=3, deterministic=True)
    ar = bf16.generate(texts, method="ar", **kw)[0].tokens
    for method, window in (("scd-gs", 16), ("scd-mc", 8), ("sjd-vp", 32)):
        gen = bf16.generate(texts, method=method, window=window, same_as_ar=True, **kw)[0]
        assert torch.equal(gen.tokens, ar), method


def test_the_run_record_names_the_dtype(bf16):
    assert environment(bf16.model, "random")["dtype"] == "bfloat16"


@pytest.mark.parametrize(
    ("dtype", "quantize", "says"),
    [
        ("float64", None, "dtype must be one of float32, bfloat16, float16"),
        (torch.int8, None, "dtype must be one of"),
        ("float32", "int4", "--quantize int4 runs in bfloat16"),
    ],
)
def test_a_dtype_that_cannot_run_is_a_config_error(dtype, quantize, says):
    with pytest.raises(ConfigError, match=says):
        check_dtype(dtype, quantize)


@pytest.mark.parametrize("native", [True, False], ids=["native-bf16-cpu", "other-cpu"])
def test_the_defaults_family_checkpoints_as_released_the_embedded_models_as_measured(monkeypatch, native):
    """Embedded models: bfloat16 where the CPU has native bf16 (measured faster there), else float32;
    the random test models float32 on every machine, so their tokens do not depend on it."""
    monkeypatch.setattr(load, "native_bf16", lambda: native)
    assert default_dtype("lumina-mgpt:/x", "cpu") == torch.bfloat16 == default_dtype("janus:/x", "cuda")
    for spec in ("default", "emoji-names", "emoji:/x", "emoji-video"):
        assert default_dtype(spec, "cpu") == (torch.bfloat16 if native else getattr(torch, E.DTYPE))
        assert default_dtype(spec, "cuda") == getattr(torch, E.DTYPE)  # not measured there yet
    for spec in ("random", "random-video"):
        assert default_dtype(spec, "cpu") == getattr(torch, E.DTYPE)


def test_native_bf16_reads_the_cpu_flags(monkeypatch):
    from jacobigen.core import cpu

    for flags, native in [({"avx512f", "avx512_bf16"}, True), ({"amx_bf16", "amx_tile"}, True), ({"avx2"}, False)]:
        monkeypatch.setattr(cpu, "cpu_flags", lambda flags=flags: flags)
        cpu.native_bf16.cache_clear()
        assert cpu.native_bf16() is native
    cpu.native_bf16.cache_clear()


def test_a_step_table_records_the_dtype_it_was_measured_in(bf16, tmp_path):
    from jacobigen.tools.steps import load_table, write_table

    steps = {"ar@1": {"nfe": 273.0, "tokens_per_iteration": 1.0, "images": 1}}
    write_table(tmp_path / "steps.json", bf16, steps, bf16.defaults, {"by": "a test"})
    assert load_table(tmp_path / "steps.json")["entries"][0]["made"]["dtype"] == "bfloat16"
