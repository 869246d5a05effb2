"""Real checkpoints in their original layouts load and behave like their own reference code.

Each test writes a tiny checkpoint the way the family's own code writes it (Lumina-mGPT's per-shard
q/k norms, LlamaGen's shared ``pretrained_models/`` folder, its training checkpoints with pickled
arguments...) and checks what a user of that release would get.
"""

import argparse

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from jacobigen import ConfigError, WeightsError, generate
from jacobigen.cli import main
from jacobigen.models import load_bundle
from tests.helpers import family_models as fm
from tests.helpers.need import need

need("transformers")


# --- Lumina-mGPT / Chameleon ------------------------------------------------------------------------


def lumina_checkpoint(directory, shards: int):
    """A tiny Chameleon saved as Lumina-mGPT saves it: q/k-norm weight and bias [shards, head_dim],
    each shard's row repeated over its heads at run time. Returns the equivalent in-memory model."""
    from safetensors.torch import load_file, save_file

    from jacobigen.models.families.chameleon import SHARD_NORM

    hf, tok = fm.chameleon()
    hf.config.model_parallel_size = shards
    per_shard = {}
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if SHARD_NORM.search(name):
                rows = 1.0 + 0.5 * torch.randn(shards, p.shape[1])
                p.copy_(rows.repeat_interleave(p.shape[0] // shards, 0))
                per_shard[name] = rows
    hf.save_pretrained(directory)
    tok.save_pretrained(directory)
    state = load_file(str(directory / "model.safetensors"))
    save_file({**state, **per_shard}, str(directory / "model.safetensors"), metadata={"format": "pt"})
    return hf


@pytest.mark.parametrize("shards", [1, 2])  # 7B: one shard for all heads; 34B-like: several
def test_lumina_per_shard_qk_norms_load_and_normalise_like_lumina(tmp_path, shards):
    from jacobigen.models.families.chameleon import chameleon_adapter

    hf = lumina_checkpoint(tmp_path, shards)
    pipe = load_bundle(f"lumina-mgpt:{tmp_path}?size=64", dtype="float32")  # against a float32 reference
    tokens = torch.tensor(pipe.encode("a red cat").cond)
    with torch.no_grad():
        assert torch.allclose(pipe.model(tokens), chameleon_adapter(hf)(tokens), atol=1e-5)


def test_chameleon_other_shape_mismatches_are_weights_errors(tmp_path):
    from safetensors.torch import load_file, save_file

    hf, tok = fm.chameleon()
    hf.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    state["model.norm.weight"] = torch.ones(3)
    save_file(state, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(WeightsError, match="model.norm.weight"):
        load_bundle(f"chameleon:{tmp_path}?size=64")


@pytest.mark.parametrize(
    "folder,rows",
    [("Lumina-mGPT-7B-512", 32), ("Lumina-mGPT-7B-1024", 64), ("Lumina-mGPT-7B-768-Omni", 48), ("my-lumina", 48)],
)
def test_lumina_resolution_comes_from_the_release_name(tmp_path, folder, rows):
    hf, tok = fm.chameleon()
    hf.save_pretrained(tmp_path / folder)
    tok.save_pretrained(tmp_path / folder)
    pipe = load_bundle(f"lumina-mgpt:{tmp_path / folder}")
    assert (pipe.layout.rows, pipe.layout.cols) == (rows, rows)


# --- Anole ----------------------------------------------------------------------------------------


def test_anole_prompt_layout_and_sampling_follow_anole(tmp_path):
    """<s> text <reserved08706> <racm3:break>, then 32 x 32 codes and <eoss>: no size, no EOL tokens."""
    hf, tok = fm.chameleon()
    hf.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    pipe = load_bundle(f"anole:{tmp_path}")
    ids = tok.convert_tokens_to_ids
    bos, eot, boi, eoi = ids("<s>"), ids("<reserved08706>"), ids("<racm3:break>"), ids("<eoss>")
    prompts = pipe.encode("a red cat")
    assert (prompts.cond, prompts.uncond) == ([[bos, *ids(["a", "red", "cat"]), eot, boi]], [[bos, boi]])
    lay = pipe.layout
    assert (lay.rows, lay.cols, lay.eol_id, lay.end_id, lay.length) == (32, 32, None, eoi, 1025)
    assert lay.image_ids == (4, 68)  # the IMGIMG* ids only
    assert pipe.defaults == {"cfg": 3.0, "temperature": 0.7, "top_p": 0.9}
    with pytest.raises(ConfigError, match="anole takes no size option"):
        load_bundle(f"anole:{tmp_path}?size=256")


# --- LlamaGen ---------------------------------------------------------------------------------------


def save_vq(vq, path):
    torch.save({"model": fm.to_llamagen_vq_keys(vq.state_dict())}, path)


@pytest.fixture(scope="module")
def pretrained_models(tmp_path_factory):
    """LlamaGen's documented layout: both GPTs, both VQs and FLAN-T5 in one pretrained_models/."""
    root = tmp_path_factory.mktemp("llamagen") / "pretrained_models"
    root.mkdir()
    torch.save({"model": fm.llamagen_state(fm.llamagen("c2i", block_size=256))}, root / "c2i_T_256.pt")
    t2i = fm.llamagen("t2i", seed=1, block_size=1024, cls_token_num=120)
    torch.save({"model": fm.llamagen_state(t2i)}, root / "t2i_T_stage2_512.pt")
    vqs = {kind: fm.tiny_vq(64, l2_norm=True, seed=seed) for kind, seed in (("c2i", 1), ("t2i", 2))}
    for kind, vq in vqs.items():
        save_vq(vq, root / f"vq_ds16_{kind}.pt")
    fm.tiny_t5(root / "t5-ckpt" / "flan-t5-xl")
    fm.llamagen_arch_json(root)
    return root, vqs


def test_llamagen_folder_with_several_gpts_asks_which(pretrained_models):
    root, _ = pretrained_models
    with pytest.raises(ConfigError, match="2 GPT checkpoints"):
        load_bundle(f"llamagen:{root}")


@pytest.mark.parametrize("kind,name,side", [("c2i", "c2i_T_256.pt", 16), ("t2i", "t2i_T_stage2_512.pt", 32)])
def test_llamagen_decodes_with_the_vq_of_its_own_task(pretrained_models, kind, name, side):
    from jacobigen.models.families.base import to_pil

    root, vqs = pretrained_models
    pipe = load_bundle(f"llamagen:{root / name}")
    assert pipe.model.config.model_type == kind and (pipe.layout.rows, pipe.layout.cols) == (side, side)
    grid = torch.randint(0, 64, (1, side, side), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = to_pil(vqs[kind].decode_codes(grid), rounded=True)[0]
    assert np.array_equal(np.asarray(pipe.decode(grid)[0]), np.asarray(want))


def test_llamagen_without_its_own_vq_says_so(tmp_path):
    fm.llamagen_arch_json(tmp_path)
    torch.save(fm.llamagen_state(fm.llamagen("t2i")), tmp_path / "t2i_T_256.pt")
    save_vq(fm.tiny_vq(64, l2_norm=True), tmp_path / "vq_ds16_c2i.pt")
    fm.tiny_t5(tmp_path / "t5")
    pipe = load_bundle(f"llamagen:{tmp_path}")
    assert "no vq_ds16_t2i.pt" in pipe.note and "vq_ds16_c2i.pt not used" in pipe.note


def llamagen_384(directory, name, rope_tables: bool = False):
    m = fm.llamagen("c2i", block_size=24 * 24)
    state = fm.llamagen_state(m)
    if rope_tables:  # saved from LlamaGen's vLLM server model: a RoPE table per attention layer
        for i in range(m.config.n_layer):
            state[f"layers.{i}.attention.freqs_cis"] = torch.zeros(1 + 24 * 24, m.config.head_dim // 2, 2)
    torch.save(state, directory / name)
    fm.llamagen_arch_json(directory)


@pytest.mark.parametrize("name,rope_tables", [("c2i_L.pt", True), ("GPT-XL-c2i-384.pt", False)])
def test_llamagen_image_size_comes_from_the_checkpoint(tmp_path, name, rope_tables):
    llamagen_384(tmp_path, name, rope_tables)
    pipe = load_bundle(f"llamagen:{tmp_path / name}")
    assert (pipe.layout.rows, pipe.layout.cols) == (24, 24)


def test_llamagen_size_nothing_tells_is_asked_for(tmp_path):
    llamagen_384(tmp_path, "c2i_L.pt")
    with pytest.raises(ConfigError, match=r"\?size=384"):
        load_bundle(f"llamagen:{tmp_path / 'c2i_L.pt'}")
    assert load_bundle(f"llamagen:{tmp_path / 'c2i_L.pt'}?size=384").layout.rows == 24


def test_llamagen_training_checkpoint_loads_only_when_trusted(tmp_path):
    """LlamaGen's train_c2i.py saves {"model", "optimizer", "steps", "args": argparse.Namespace}."""
    m = fm.llamagen("c2i")
    args = argparse.Namespace(
        gpt_model="GPT-B",
        gpt_type="c2i",
        image_size=64,
        downsample_size=16,
        cls_token_num=1,
        num_classes=10,
        vocab_size=64,
    )
    ckpt = tmp_path / "0005000.pt"
    torch.save({"model": fm.llamagen_state(m), "optimizer": {}, "steps": 5000, "args": args}, ckpt)
    fm.llamagen_arch_json(tmp_path)
    with pytest.raises(WeightsError, match="--trust-checkpoint") as err:
        load_bundle(f"llamagen:{ckpt}")
    assert "argparse.Namespace" in str(err.value) and "run code" in str(err.value)
    pipe = load_bundle(f"llamagen:{ckpt}", trust_checkpoint=True, dtype="float32")  # against a float32 reference
    assert (pipe.layout.rows, pipe.layout.cols) == (4, 4)  # image_size 64 / 16, from the args
    prompts = pipe.encode("3")
    kw = dict(layout=pipe.layout, method="ar", top_k=1, cfg=4.0, uncond=prompts.uncond)
    assert torch.equal(generate(pipe.model, prompts.cond, **kw).tokens, generate(m, prompts.cond, **kw).tokens)
    cli = [
        "generate",
        "--model",
        f"llamagen:{ckpt}",
        "3",
        "--method",
        "sjd",
        "--window",
        "8",
        "--no-progress",
        "--out",
        str(tmp_path / "out.png"),
    ]
    refused = CliRunner().invoke(main, cli)
    assert refused.exit_code != 0 and "--trust-checkpoint" in refused.output
    assert CliRunner().invoke(main, cli + ["--trust-checkpoint"]).exit_code == 0


def test_llamagen_t2i_cleans_captions_as_its_training_did():
    """clean_caption twice (lowercase, URLs, HTML, spacing) before FLAN-T5, for cond and uncond alike."""
    from jacobigen.models.families.llamagen import llamagen_pipeline

    seen = []

    def caption(text):
        seen.append(text)
        return fm.caption(text)

    pipe = llamagen_pipeline(fm.llamagen("t2i"), caption_fn=caption)
    raw = "  A <b>Red</b> CAT   https://example.com  "
    prompts = pipe.encode(raw)
    assert len(prompts.cond[0]) == len(prompts.uncond[0]) == 3
    assert seen == ["a red cat"]


def test_llamagen_c2i_defaults_are_its_demo_settings():
    from jacobigen.models.families.llamagen import llamagen_pipeline

    pipe = llamagen_pipeline(fm.llamagen("c2i"))
    assert pipe.defaults == {"cfg": 4.0, "temperature": 1.0, "top_k": 2000, "top_p": None}


# --- Janus and pixels --------------------------------------------------------------------------------


class RecordingTokenizer:
    def __init__(self, tok):
        self.tok, self.texts = tok, []

    def __call__(self, text, **kw):
        self.texts.append(text)
        return self.tok(text, **kw)

    def __getattr__(self, name):
        return getattr(self.tok, name)


def test_janus_strips_the_prompt_like_its_chat_template():
    from jacobigen.models.families.janus import janus_pipeline

    hf, tok = fm.janus()
    rec = RecordingTokenizer(tok)
    pipe = janus_pipeline(hf, rec)
    rec.texts.clear()
    pipe.encode("  a red cat \n")
    assert set(rec.texts) == {"<|User|>: a red cat\n\n<|Assistant|>:"}  # cond and its padded uncond


def test_pixels_truncate_or_round_as_each_original_does():
    from jacobigen.models.families.base import to_pil

    x = torch.tensor([-1.5, -1.0, -0.2, 0.3, 0.77, 0.9999, 1.0, 2.0]).view(1, 1, 1, -1).expand(1, 3, 1, -1)
    unit = ((x.clamp(-1, 1) + 1) / 2).numpy()[0].transpose(1, 2, 0)
    truncated = (unit * 255).astype(np.uint8)  # Lumina/Chameleon, Janus, Emu3
    rounded = np.clip(unit * 255 + 0.5, 0, 255).astype(np.uint8)  # LlamaGen (torchvision save_image)
    assert np.array_equal(np.asarray(to_pil(x)[0]), truncated)
    assert np.array_equal(np.asarray(to_pil(x, rounded=True)[0]), rounded)
    assert not np.array_equal(truncated, rounded)
