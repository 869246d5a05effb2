"""The streaming load at the size of the plan: checkpoints written in the released layouts by
benchmarks/scale/make_checkpoint.py load, the plan counts exactly the model the loader builds, and the
load's measured peak stays within the plan's load peak (a loader that keeps a copy does not)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from jacobigen.core.errors import WeightsError
from jacobigen.core.quantize import quantized_as, weight_bytes
from jacobigen.models import memory, shapes
from jacobigen.models.load import load_bundle

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "scale"))
import make_checkpoint  # noqa: E402

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = {}
    for family in ("janus", "lumina2"):
        folder = tmp_path_factory.mktemp(family)
        make_checkpoint.main(["--family", family, "--shape", "tiny", "--out", str(folder), "--shard-gb", "0.0002"])
        out[family] = folder
    return out


@pytest.mark.parametrize("family", ["janus", "lumina2"])
def test_made_checkpoints_are_released_layouts_that_load_and_decode(tiny, family):
    index = json.loads((tiny[family] / "model.safetensors.index.json").read_text())["weight_map"]
    assert len(set(index.values())) > 1  # sharded
    stack = "model.language_model." if family == "janus" else "model."
    assert f"{stack}layers.0.self_attn.q_proj.weight" in index and "lm_head.weight" in index
    bundle = load_bundle(f"{family}:{tiny[family]}" + ("?size=256" if family == "lumina2" else ""))
    gen, images = bundle.generate(["a red fox"], method="scd-mc", window=8, seed=[1], top_k=4)
    assert gen.tokens.shape[0] == 1 and images[0].size[0] > 0 and bundle.note == ""


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The other families' tiny checkpoints, as make_checkpoint writes them."""
    out = {}
    for family in ("chameleon", "llamagen", "cosmos", "emu3"):
        folder = tmp_path_factory.mktemp(family)
        make_checkpoint.main(["--family", family, "--shape", "tiny", "--out", str(folder), "--shard-gb", "0.0005"])
        out[family] = folder
    return out


@pytest.mark.parametrize("family", ["chameleon", "llamagen", "cosmos", "emu3"])
@pytest.mark.parametrize("quantize", [None, "int8"])
def test_made_checkpoints_of_the_other_families_stream_and_decode(made, family, quantize, tmp_path):
    folder = made[family]
    prompt, option = {"chameleon": ("a red fox", "?size=64"), "llamagen": ("3", ""), "cosmos": ("", ""),
                      "emu3": ("a red fox", "?size=32")}[family]  # fmt: skip
    if family == "cosmos":  # a latent frame of codes as the condition
        prompt = str(tmp_path / "context.npy")
        np.save(prompt, np.arange(6).reshape(1, 2, 3))
    elif family != "emu3":  # whose VQ is in its shards
        assert (folder / ("tokenizer/vqgan.ckpt" if family == "chameleon" else "vq_ds16_c2i.pt")).is_file()
    bundle = load_bundle(f"{family}:{folder}{option}", quantize=quantize)
    assert quantized_as(bundle.model) == quantize
    gen, images = bundle.generate([prompt], method="scd-mc", window=8, seed=[1], top_k=4)
    assert gen.tokens.shape[0] == 1 and len(images) == 1
    if family != "cosmos":  # an image through the family's own VQ decoder, not a token palette
        assert bundle.note == "" and images[0].size[0] == (8 if family == "emu3" else 64)


@pytest.mark.parametrize("quantize", [None, "int8"])
@pytest.mark.parametrize("family", ["lumina2", "chameleon", "emu3", "llamagen", "cosmos"])
def test_the_plan_counts_the_model_the_streaming_load_builds(tiny, made, family, quantize):
    """Before any weight loads, the plan counts the bytes of the model the loader then builds: from
    config.json, or for LlamaGen and Cosmos from the memory-mapped tensors' shapes."""
    from importlib import import_module

    folder = (tiny if family == "lumina2" else made)[family]
    size = {"lumina2": 256, "chameleon": 64, "emu3": 32}.get(family)
    load = import_module(f"jacobigen.models.families.{family}").load
    kw = {"size": size} if size else {}
    bundle = load(str(folder), "cpu", dtype=torch.bfloat16, quantize=quantize, **kw)
    spec = f"{family}:{folder}" + (f"?size={size}" if size else "")
    plan = memory.plan(shapes.shape_of(spec), dtype=torch.bfloat16, quantize=quantize, free=None)
    assert plan.weights - plan.shape.decoder == weight_bytes(bundle.model)
    assert (plan.shape.decoder > 0) == (family in ("lumina2", "chameleon"))  # MoVQGAN / VQGAN kept at float32
    assert plan.shape.image_tokens == bundle.layout.length
    assert (plan.shape.image_decode > 0) == (family != "cosmos")  # cosmos previews its codes


@pytest.mark.parametrize(
    "change, message",
    [({"num_attention_heads": 0}, "num_attention_heads must be a whole number >= 1, got 0"),
     ({"hidden_size": -32}, "hidden_size must be a whole number >= 1, got -32")],
)  # fmt: skip
def test_hostile_configs_are_clear_errors_in_the_plan(tmp_path, tiny, change, message):
    folder = tmp_path / "hostile"
    folder.mkdir()
    config = json.loads((tiny["lumina2"] / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(WeightsError, match=message):  # the checkpoint's file is what is wrong
        shapes.shape_of(f"lumina2:{folder}")


PEAK = """
import json, sys, torch
from jacobigen.core.quantize import quiet_torchao, quantize_model
with quiet_torchao():
    import transformers
    from importlib import import_module
    family = import_module("jacobigen.models.families." + sys.argv[6])
if sys.argv[3] == "mutant":
    sys.path.insert(0, sys.argv[4])
    from tests.helpers.mutants import keep_full_copy
    kept = keep_full_copy()
quantize = None if sys.argv[2] == "none" else sys.argv[2]
family.load(sys.argv[5], "cpu", size=256, dtype=torch.bfloat16, quantize=quantize)  # the imports a load makes
status = lambda f: next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith(f + ":"))
open("/proc/self/clear_refs", "w").write("5")
before = status("VmRSS")
bundle = family.load(sys.argv[1], "cpu", size=256, dtype=torch.bfloat16, quantize=quantize)
quantize_model(bundle.model, quantize)
print(json.dumps({"peak": status("VmHWM") - before}))
"""


def measured_peak(folder: Path, quantize: str | None, mutant: bool, warm: Path, family: str = "lumina2") -> int:
    """Bytes the load adds to the process at its peak (VmHWM over the RSS before it), in a fresh one."""
    # glibc serves blocks under its dynamic mmap threshold (up to 32 MB) from the heap and may keep them
    # after free: at this test's shape every chunk is that small, and the kept pages varied the peak by
    # 40 MB from run to run (one CI run went 11% over the plan). A fixed 1 MB threshold gives each
    # chunk its own mapping, as a real shape's chunks (64 MB and up) have anyway.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": str(1 << 20),
           "PYTHONPATH": f"{ROOT / 'src'}:{os.environ.get('PYTHONPATH', '')}"}  # fmt: skip
    args = [
        sys.executable,
        "-c",
        PEAK,
        str(folder),
        quantize or "none",
        "mutant" if mutant else "ours",
        str(ROOT),
        str(warm),
        family,
    ]
    res = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])["peak"]


@pytest.fixture(scope="module", params=["lumina2", "chameleon"])
def peak_checkpoint(request, tmp_path_factory):
    """(family, folder) of a peak-test checkpoint: Chameleon used to load transformers' whole model and
    convert beside it; now it streams like Lumina-mGPT 2.0."""
    folder = tmp_path_factory.mktemp(f"{request.param}-peak")
    make_checkpoint.main(["--family", request.param, "--shape", "peak-test", "--out", str(folder)])
    return request.param, folder


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="measures VmHWM of /proc (Linux)")
@pytest.mark.parametrize("quantize", [None, "int8"])
def test_the_measured_load_peak_is_held_to_the_plan_and_a_copying_loader_is_not(peak_checkpoint, tiny, made, quantize):
    family, folder = peak_checkpoint
    warm = {**tiny, **made}[family]  # a tiny load of the same family first: its imports are not the peak
    shape = shapes.shape_of(f"{family}:{folder}?size=256")
    plan = memory.plan(shape, dtype=torch.bfloat16, quantize=quantize, free=None)
    ours = measured_peak(folder, quantize, False, warm, family)
    assert 0.8 * plan.weights <= ours <= 1.1 * plan.peak_loading, (ours, plan.weights, plan.peak_loading)
    copying = measured_peak(folder, quantize, True, warm, family)
    assert copying > 1.1 * plan.peak_loading, (copying, plan.peak_loading)


def test_dry_run_of_a_missing_folder_says_it_is_missing(tmp_path):
    from click.testing import CliRunner

    from jacobigen.cli import main

    missing = tmp_path / "nothing"
    args = ["generate", "--model", f"lumina-mgpt:{missing}", "a red fox", "--quantize", "int8", "--dry-run"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code != 0 and f"{missing} is not a directory" in res.output


def test_pixels_decode_one_image_at_a_time_after_the_cache_is_freed(tiny, monkeypatch):
    """The plan's total is the weights plus the larger of the token decode and one image's pixel decode
    (``Shape.image_decode``): that holds only if no KV cache lives while the pixels decode, and if the
    images of a batch decode one by one."""
    import gc

    from jacobigen.core.cache import KVCache
    from jacobigen.models.movqgan import MoVQDecoder

    seen = []
    decode = MoVQDecoder.decode_codes

    def watched(self, codes):
        gc.collect()
        seen.append((codes.shape[0], sum(isinstance(o, KVCache) for o in gc.get_objects())))
        return decode(self, codes)

    monkeypatch.setattr(MoVQDecoder, "decode_codes", watched)
    bundle = load_bundle(f"lumina2:{tiny['lumina2']}?size=256")
    _, images = bundle.generate(["a red fox"], method="scd-mc", window=8, seed=[1, 2], top_k=4)
    assert len(images) == 2 and seen == [(1, 0), (1, 0)]
