"""Our decoder against transformers' modules for every Llama-shaped family (Chameleon / Lumina-mGPT /
Anole, Janus-Pro, Emu3): same logits, same greedy tokens, one graph under torch.compile."""

from dataclasses import replace

import pytest
import torch

from jacobigen import ConfigError, generate
from jacobigen.core.masks import block_mask, causal, prefix_structure
from jacobigen.models import load_bundle
from jacobigen.models.bundle import encode_one
from jacobigen.models.transformer import Transformer, TransformerConfig
from tests.helpers import family_models as fm
from tests.helpers.need import need

need("transformers")

CFG = 3.0


def spread_norms(hf, seed: int = 3):
    """Default norms are ones and zeros, under which a swapped weight or a missing bias goes unseen."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "norm" in name and "vq" not in name:
                p.copy_(float(name.endswith("weight")) + 0.5 * torch.randn(p.shape, generator=g))
    return hf


def chameleon(attn="sdpa", **over):
    hf, tok = fm.chameleon(attn=attn)
    if over:
        from transformers import ChameleonForConditionalGeneration

        torch.manual_seed(0)
        hf = ChameleonForConditionalGeneration(replace_config(hf.config, **over)).eval()
    return spread_norms(hf), tok


def replace_config(cfg, **over):
    attn = cfg._attn_implementation
    cfg = cfg.__class__.from_dict({**cfg.to_dict(), **over})
    cfg._attn_implementation = attn
    return cfg


def chameleon_pipe(backend, hf_tok=None):
    from jacobigen.models.families.chameleon import chameleon_pipeline

    hf, tok = hf_tok or chameleon()
    return chameleon_pipeline(hf, tok, size=64, backend=backend)


def anole_pipe(backend, hf_tok=None):
    from jacobigen.models.families.anole import anole_pipeline

    hf, tok = hf_tok or chameleon()
    return anole_pipeline(hf, tok, side=4, backend=backend)


def janus_pipe(backend, hf_tok=None):
    from jacobigen.models.families.janus import janus_pipeline

    hf, tok = hf_tok or fm.janus()
    return janus_pipeline(spread_norms(hf), tok, backend=backend)


def emu3_pipe(backend, hf_tok=None):
    from jacobigen.models.families.emu3 import emu3_pipeline

    hf, tok = hf_tok or fm.emu3()
    return emu3_pipeline(spread_norms(hf), tok, side=4, backend=backend)


PIPES = {"chameleon": chameleon_pipe, "anole": anole_pipe, "janus": janus_pipe, "emu3": emu3_pipe}
MAKERS = {"chameleon": chameleon, "anole": chameleon, "janus": fm.janus, "emu3": fm.emu3}


def both(name, attn="sdpa", **over):
    """The family's bundle on our decoder and on transformers' modules (with attention ``attn``), over
    the same weights."""
    hf_tok = chameleon(attn, **over) if name in ("chameleon", "anole") else MAKERS[name](attn=attn)
    return PIPES[name]("ours", hf_tok), PIPES[name]("transformers", hf_tok)


def ragged_logits(model, prompt, image):
    """Logits of a ragged two-row prefill and of one cached block after it, as the decoders send them."""
    seq = torch.tensor(prompt + image)
    p, n = len(prompt), len(prompt) + len(image)
    cache = model.new_cache(2, n + 2)
    cut = torch.tensor([p + 2, p])
    tokens = torch.stack([seq[: p + 2], torch.cat([seq[:p], seq.new_zeros(2)])])
    positions = torch.arange(p + 2).expand(2, -1)
    with torch.no_grad():
        first = model(tokens, positions, block_mask(cache.lengths, n + 2, prefix_structure(cut, p + 2)), cache)
        cache.commit(None, cut)
        t = n - p - 2
        block = torch.stack([seq[p + 2 :], seq[p : n - 2]])
        second = model(block, cut[:, None] + torch.arange(t), block_mask(cache.lengths, n + 2, causal(t)), cache)
    return first, second


def assert_close_logits(ours, theirs):
    for a, b in zip(ours, theirs, strict=True):
        finite = torch.isfinite(b)
        assert torch.equal(finite, torch.isfinite(a))
        assert (a[finite] - b[finite]).abs().max() <= 1e-4


def sample_sequence(pipe, name):
    model, prompt, _ = encode_one(pipe, "a red cat")
    lo = pipe.layout.image_ids[0]
    return model, prompt + list(pipe.layout.header), [lo + i for i in (3, 1, 4, 1, 5, 9, 2, 6)]


@pytest.mark.parametrize("name", list(PIPES))
def test_logits_match_transformers_on_ragged_cached_blocks(name):
    ours, theirs = both(name)
    model, prompt, image = sample_sequence(ours, name)
    assert_close_logits(ragged_logits(model, prompt, image), ragged_logits(theirs.model, prompt, image))


@pytest.mark.parametrize("over", [{"swin_norm": True}, {"tie_word_embeddings": True}, {"num_key_value_heads": 4}])
def test_chameleon_variants_match_transformers(over):
    ours, theirs = both("chameleon", **over)
    cfg = ours.model.config
    assert (cfg.swin_norm, cfg.tie_embeddings, cfg.kv_heads) == (
        over.get("swin_norm", False),
        over.get("tie_word_embeddings", False),
        over.get("num_key_value_heads", 2),
    )
    model, prompt, image = sample_sequence(ours, "chameleon")
    assert_close_logits(ragged_logits(model, prompt, image), ragged_logits(theirs.model, prompt, image))


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("name", list(PIPES))
def test_greedy_tokens_match_the_transformers_path(name, attn):
    ours, theirs = both(name, attn)
    got = {}
    for label, pipe in (("ours", ours), ("transformers", theirs)):
        model, cond, uncond = encode_one(pipe, "a red cat")
        kw = dict(layout=pipe.layout, top_k=1, cfg=CFG, uncond=uncond)
        got[label] = [generate(model, cond, method=m, window=8, **kw).tokens for m in ("ar", "sjd")]
    assert torch.equal(got["ours"][0], got["transformers"][0])
    assert torch.equal(got["ours"][1], got["transformers"][1])
    assert torch.equal(got["ours"][0], got["ours"][1])


# --- Lumina-mGPT's per-shard q/k norms ----------------------------------------------------------------


@pytest.mark.parametrize("shards", [1, 2])
def test_lumina_per_shard_qk_norms_convert_from_the_loaded_model_and_from_the_file(tmp_path, shards):
    from safetensors.torch import load_file

    from jacobigen.models.families.chameleon import chameleon_adapter
    from jacobigen.models.families.convert import convert_state
    from tests.models.test_family_checkpoints import lumina_checkpoint

    hf = lumina_checkpoint(tmp_path, shards)
    pipe = load_bundle(f"lumina-mgpt:{tmp_path}?size=64", dtype="float32")  # against a float32 reference
    model = pipe.model
    assert isinstance(model, Transformer) and model.config.qk_norm == "chameleon"
    raw = load_file(str(tmp_path / "model.safetensors"))
    assert raw["model.layers.0.self_attn.q_norm.weight"].shape[0] == shards
    from_file = Transformer(model.config).eval()
    from_file.load_state_dict(convert_state(raw, model.config, "model."))
    prompt, image = pipe.encode("a red cat").cond[0], list(range(4, 12))
    reference = ragged_logits(chameleon_adapter(hf, "transformers"), prompt, image)
    assert_close_logits(ragged_logits(model, prompt, image), reference)
    assert_close_logits(ragged_logits(from_file, prompt, image), reference)


# --- torch.compile ----------------------------------------------------------------------------------


def compiled_matches_eager(model, prompt: list[int]):
    """Two block sizes through ``torch.compile(fullgraph=True)`` (backend eager: the graph, no codegen):
    logits equal to eager, bit for bit, and no graph break."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    caches = [model.new_cache(2, 32), model.new_cache(2, 32)]
    lengths = torch.zeros(2, dtype=torch.int64)
    for t in (len(prompt), 3):
        tokens = torch.tensor(prompt[:t]).expand(2, -1)
        positions = lengths[:, None] + torch.arange(t)
        mask = block_mask(lengths, 32, causal(t))
        with torch.no_grad():
            want, got = (m(tokens, positions, mask, c) for m, c in zip((model, compiled), caches, strict=True))
        assert torch.equal(got, want)
        lengths = lengths + torch.tensor([t, t - 1])
        for c in caches:
            c.commit(None, lengths - c.lengths)
    assert not counters["graph_break"], dict(counters["graph_break"])


@pytest.mark.parametrize("name", ["chameleon", "janus", "emu3"])
def test_family_models_compile_to_one_graph(name):
    pipe, _ = both(name)
    model, prompt, image = sample_sequence(pipe, name)
    compiled_matches_eager(model, prompt[:4] + image[:2])


@pytest.mark.parametrize("name", list(PIPES))
def test_family_decode_step_compiles_to_one_graph_with_eager_tokens(name):
    """The whole step on each family's model (Janus' own image embedding and head included): no graph
    break, one graph for the image's block shape, the tokens of eager."""
    from jacobigen.decode.capture import compile_counts

    pipe, _ = both(name)
    model, cond, uncond = encode_one(pipe, "a red cat")
    kw = dict(layout=pipe.layout, cfg=CFG, uncond=uncond, top_k=16, method="scd-mc+pac", window=8, seed=[1])
    eager = generate(model, cond, **kw)
    before = compile_counts()
    compiled = generate(model, cond, compile="eager", **kw)
    after = compile_counts()
    assert torch.equal(compiled.tokens, eager.tokens)
    assert after["graph_breaks"] == before["graph_breaks"] and after["graphs"] - before["graphs"] == 1


def test_our_decoder_compiles_with_every_option():
    torch.manual_seed(0)
    cfg = TransformerConfig(
        vocab_size=50, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, qk_norm="chameleon", swin_norm=True
    )
    compiled_matches_eager(Transformer(cfg).randomize_().eval(), [1, 5, 7, 9, 11])


# --- configs ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "over,message",
    [
        ({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}}, "'linear'"),
        ({"attention_bias": True}, "attention_bias=True"),
        ({"hidden_act": "gelu"}, "hidden_act='gelu'"),
    ],
)
def test_what_our_decoder_does_not_compute_is_refused_by_name(over, message):
    from transformers import ChameleonForConditionalGeneration

    from jacobigen.models.families.convert import from_hf

    hf, _ = fm.chameleon()
    with pytest.raises(ConfigError, match=message):
        from_hf(ChameleonForConditionalGeneration(replace_config(hf.config, **over)))


def test_unknown_backend_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown backend 'hf'"):
        chameleon_pipe("hf")


def test_lumina_7b_config_has_the_release_layout():
    """Every tensor of a transformers Chameleon of Lumina-mGPT-7B's shape lands in our 7B config."""
    from transformers import ChameleonConfig, ChameleonForConditionalGeneration

    from jacobigen.models.families.chameleon import lumina_7b_config
    from jacobigen.models.families.convert import config_from_hf, convert_state

    ours = lumina_7b_config()
    shape = dict(vocab_size=65536, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32)
    heads = dict(num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=10240)
    hf_cfg = ChameleonConfig(**shape, **heads, vocabulary_map={"<image>": 8711})
    with torch.device("meta"):
        hf = ChameleonForConditionalGeneration(hf_cfg)
        model = Transformer(ours)
    assert replace(config_from_hf(hf), n_kv_heads=None) == ours
    model.load_state_dict(convert_state(hf.state_dict(), ours, "model."), assign=True)
    assert 7.0e9 < sum(p.numel() for p in model.parameters()) < 7.1e9
