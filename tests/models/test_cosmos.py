"""Cosmos-1.0-Autoregressive on tiny random configs, against a plain loop written the way Cosmos'
reference code computes (``networks/transformer.py``, ``modules/embedding.py``: a 3-D RoPE table
built by repeating per-axis tables and indexed by sequence position, TransformerEngine's
rotate-half, q/k RMSNorm before RoPE, grouped K/V repeated per head, full causal recompute)."""

import math

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from jacobigen import METHODS, ConfigError, generate
from jacobigen.core.contract import conformance
from jacobigen.models.families import load_family
from jacobigen.models.families.cosmos import (
    Cosmos,
    CosmosConfig,
    clean_state,
    config_from_state,
    cosmos_pipeline,
    inverse_frequencies,
    save_config,
    to_checkpoint,
)
from jacobigen.models.families.cosmos_tokenizer import LEVELS, fsq_codes, pixel_frames
from tests.helpers.need import need

LOSSLESS = [name for name, m in METHODS.items() if m.lossless and name != "ar"]


def tiny(**over) -> CosmosConfig:
    """2 layers of 48, 4 heads over 2 K/V heads, latent [3, 2, 3] with one condition frame."""
    base = dict(
        dim=48, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64, vocab_size=64, latent_shape=(3, 2, 3), context_frames=1
    )
    return CosmosConfig(**{**base, **over})


def random_cosmos(seed=0, **over) -> Cosmos:
    torch.manual_seed(seed)
    model = Cosmos(tiny(**over))
    with torch.no_grad():  # peaked, context-dependent laws: greedy paths that depend on every position
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, p.shape[1] ** -0.5)
        model.backbone.embed.weight.normal_(0, 1.0)
    return model.eval()


def reference_rope_table(c):
    """Cosmos' RotaryPositionEmbeddingPytorchV2 table, [T*H*W, head_dim]: (t, h, w) halves, twice."""
    temporal, spatial = inverse_frequencies(c)
    t, h, w = c.latent_shape
    seq = torch.arange(max(c.latent_shape)).float()
    et, eh, ew = torch.outer(seq[:t], temporal), torch.outer(seq[:h], spatial), torch.outer(seq[:w], spatial)
    emb = torch.cat(
        [
            et[:, None, None].expand(t, h, w, -1),
            eh[None, :, None].expand(t, h, w, -1),
            ew[None, None].expand(t, h, w, -1),
        ]
        * 2,
        -1,
    )
    return emb.reshape(t * h * w, -1)


def rms(x, weight, eps):
    return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight


def rotate_half_te(x):
    x1, x2 = x.view(*x.shape[:-1], 2, x.shape[-1] // 2).unbind(-2)
    return torch.cat((-x2, x1), -1)


def reference_logits(state, c, seq):
    """Last-position logits of a full causal forward over ``seq`` [S], written from the state dict."""
    emb = reference_rope_table(c)[: len(seq)]
    cos, sin = emb.cos()[None, :, None], emb.sin()[None, :, None]
    hd = c.hd
    x = state["tok_embeddings.weight"][torch.tensor(seq)][None]
    causal = torch.tril(torch.ones(len(seq), len(seq), dtype=torch.bool))
    for i in range(c.n_layers):
        pre = f"layers.{i}."
        h = rms(x, state[pre + "attention_norm.weight"], c.norm_eps)
        q = (h @ state[pre + "attention.wq.weight"].T).view(1, len(seq), -1, hd)
        k = (h @ state[pre + "attention.wk.weight"].T).view(1, len(seq), -1, hd)
        v = (h @ state[pre + "attention.wv.weight"].T).view(1, len(seq), -1, hd)
        q = rms(q, state[pre + "attention.q_norm.weight"], c.norm_eps)
        k = rms(k, state[pre + "attention.k_norm.weight"], c.norm_eps)
        q, k = q * cos + rotate_half_te(q) * sin, k * cos + rotate_half_te(k) * sin
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        att = (q @ k.transpose(-1, -2) / math.sqrt(hd)).masked_fill(~causal, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(1, len(seq), -1) @ state[pre + "attention.wo.weight"].T
        x = x + y
        h = rms(x, state[pre + "ffn_norm.weight"], c.norm_eps)
        ff = (
            torch.nn.functional.silu(h @ state[pre + "feed_forward.w1.weight"].T)
            * (h @ state[pre + "feed_forward.w3.weight"].T)
        ) @ state[pre + "feed_forward.w2.weight"].T
        x = x + ff
    return (rms(x, state["norm.weight"], c.norm_eps) @ state["output.weight"].T)[0, -1]


def reference_greedy(model, prompt):
    state, c = {k: v.float() for k, v in to_checkpoint(model).items()}, model.config
    seq = list(prompt)
    with torch.no_grad():
        while len(seq) < c.max_seq_len:
            seq.append(int(reference_logits(state, c, seq).argmax()))
    return seq[len(prompt) :]


PROMPT = [5, 17, 33, 2, 60, 41]  # one condition latent frame of 2 x 3 tokens


@pytest.mark.parametrize("over", [{}, {"yarn": True, "original_latent_shape": (2, 2, 2)}, {"head_dim": 16}])
def test_greedy_ar_equals_the_reference_loop(over):
    model = random_cosmos(**over)
    pipe = cosmos_pipeline(model)
    gen = generate(model, PROMPT, layout=pipe.layout, method="ar", top_k=1)
    assert gen.tokens[0].tolist() == reference_greedy(model, PROMPT)
    assert gen.grid.shape == (1, 2, 2, 3)


def test_every_lossless_preset_equals_ar_greedy():
    model = random_cosmos(1)
    lay = cosmos_pipeline(model).layout
    ar = generate(model, PROMPT, layout=lay, method="ar", top_k=1).tokens
    for name in LOSSLESS:
        assert torch.equal(generate(model, PROMPT, layout=lay, method=name, window=5, top_k=1).tokens, ar), name
    pjd = generate(model, PROMPT, layout=lay, method="pjd", window=4, pjd_context=lay.cols, top_k=1)
    assert torch.equal(pjd.tokens, ar)


def test_grouped_query_attention_never_copies_the_cache(monkeypatch):
    """Cosmos runs on our decoder: each K/V head attends for its group of query heads, so a cached
    step never repeats the cache per query head (the old block stack copied it per layer per step)."""
    model = random_cosmos()
    assert model.config.n_heads > model.config.n_kv_heads
    cache = model.new_cache(1, model.max_seq_len)
    tokens = torch.tensor([PROMPT])
    mask = torch.zeros(1, 1, len(PROMPT), model.max_seq_len).masked_fill(
        torch.arange(model.max_seq_len) > torch.arange(len(PROMPT))[:, None], float("-inf")
    )
    with torch.no_grad():
        want = model(tokens)

        def copy(*args, **kwargs):
            raise AssertionError("the cache was repeated per query head")

        monkeypatch.setattr(torch.Tensor, "repeat_interleave", copy)
        monkeypatch.setattr(torch, "repeat_interleave", copy)
        got = model(tokens, torch.arange(len(PROMPT))[None], mask, cache)
    assert (got - want).abs().max() <= 1e-5


def test_rope_splits_each_head_as_cosmos_does():
    """head_dim 128: d_h = 42, d_t = 44 -> 22 temporal and 21 + 21 spatial frequency pairs."""
    temporal, spatial = inverse_frequencies(tiny(dim=4096, n_heads=32, n_kv_heads=8, latent_shape=(5, 40, 64)))
    assert temporal.shape == (22,) and spatial.shape == (21,)
    assert torch.allclose(spatial[1], torch.tensor(500000.0 ** (-2 / 42)))
    assert torch.allclose(temporal[1], torch.tensor(500000.0 ** (-2 / 44)))


def test_keeps_the_model_contract():
    conformance(random_cosmos(), PROMPT, [3, 1, 4, 1, 5, 9])


def test_fsq_codes_invert_cosmos_indexing():
    """Index = sum of digit * basis (basis: cumulative product of the levels before), codes =
    (digit - level // 2) / (level // 2)."""
    digits = torch.tensor([[7, 0, 3, 4, 2, 0], [0, 0, 0, 0, 0, 0], [1, 2, 3, 1, 2, 3]])
    basis = torch.tensor([1, 8, 64, 512, 2560, 12800])
    codes = fsq_codes((digits * basis).sum(-1))
    half = torch.tensor(LEVELS) // 2
    assert torch.allclose(codes, (digits - half).float() / half)
    assert fsq_codes(torch.tensor(63999)).tolist() == [0.75, 0.75, 0.75, 1.0, 1.0, 1.0]


class TinyDecoder(torch.nn.Module):
    """A stand-in for Cosmos' decoder.jit with its signature: indices [B, t, h, w] ->
    [B, 3, 1 + 8 (t - 1), 16 h, 16 w] in [-1, 1]."""

    def forward(self, indices: torch.Tensor) -> torch.Tensor:
        b, t, h, w = indices.shape
        x = (indices.float() / 32.0 - 1.0)[:, None].expand(b, 3, t, h, w)
        x = torch.cat([x[:, :, :1], x[:, :, 1:].repeat_interleave(8, 2)], 2)
        return x.repeat_interleave(16, 3).repeat_interleave(16, 4)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit.script: Cosmos ships TorchScript
def test_checkpoint_roundtrip_decodes_the_clip_with_its_condition_frames(tmp_path):
    """model.pt as Cosmos stores it (``model.`` prefix, TransformerEngine extra state), cosmos.json for
    the latent shape, decoder.jit beside it: the clip is condition + sampled frames at 16x pixels."""
    need("transformers")  # load_family's import check
    model = random_cosmos(2)
    state = {f"model.{k}": v for k, v in to_checkpoint(model).items()}
    state["model.layers.0.attention._extra_state"] = torch.zeros(1)
    torch.save({"model": state}, tmp_path / "model.pt")
    save_config(model, tmp_path)
    torch.jit.script(TinyDecoder()).save(str(tmp_path / "decoder.jit"))
    np.save(tmp_path / "context.npy", np.array(PROMPT).reshape(1, 2, 3))

    pipe = load_family("cosmos", str(tmp_path), "cpu")
    assert pipe.note == ""  # decoder.jit found: clips are pixels below
    assert config_from_state(clean_state(state)).dim == 48
    gen, clips = pipe.generate([str(tmp_path / "context.npy")], top_k=1, method="scd-gs", window=8, seed=[0, 1])
    assert gen.grid.shape == (2, 2, 2, 3)
    assert gen.tokens[0].tolist() == reference_greedy(model, PROMPT)
    assert len(clips) == 2 and len(clips[0]) == pixel_frames(3) == 17
    assert clips[0][0].size == (3 * 16, 2 * 16)
    first = np.asarray(clips[0][0])[0, 0, 0]  # condition token 5 -> (5/32 - 1) * 0.5 + 0.5
    assert first == round((5 / 32 - 1) * 0.5 * 255 + 0.5 * 255)


def test_without_a_decoder_clips_preview_the_codes(tmp_path):
    pipe = cosmos_pipeline(random_cosmos())
    assert "no decoder.jit" in pipe.note
    np.save(tmp_path / "c.npy", np.array(PROMPT).reshape(1, 2, 3))
    gen, clips = pipe.generate(str(tmp_path / "c.npy"), top_k=1, method="sjd", window=4)
    assert len(clips[0]) == 3 and clips[0][0].size == (48, 32)
    with pytest.raises(ConfigError, match="npy"):
        pipe.generate("a red cat")
    np.save(tmp_path / "bad.npy", np.zeros((2, 2, 3), dtype=int))
    with pytest.raises(ConfigError, match="shape"):
        pipe.generate(str(tmp_path / "bad.npy"))


def test_video2world_checkpoints_are_refused():
    state = clean_state(to_checkpoint(random_cosmos()))
    state["layers.0.cross_attention.wq.weight"] = torch.zeros(1)
    with pytest.raises(ConfigError, match="Video2World"):
        config_from_state(state)


def test_cli_generate_video_on_cosmos(tmp_path):
    need("transformers")
    from jacobigen.cli import main

    model = random_cosmos(3)
    torch.save(to_checkpoint(model), tmp_path / "model.pt")
    save_config(model, tmp_path)
    np.save(tmp_path / "c.npy", np.array(PROMPT).reshape(1, 2, 3))
    out = tmp_path / "clip.gif"
    res = CliRunner().invoke(
        main,
        [
            "generate-video",
            str(tmp_path / "c.npy"),
            "--model",
            f"cosmos:{tmp_path}",
            "--method",
            "scd-gs",
            "--window",
            "8",
            "--out",
            str(out),
            "--no-progress",
        ],
    )
    assert res.exit_code == 0, res.output
    assert out.is_file() and "step compression" in res.output


def test_bench_runs_on_cosmos_with_a_condition_prompt(tmp_path):
    """Cosmos has no example prompts: bench takes --prompt (and says so without one)."""
    need("transformers")
    import json

    from jacobigen.cli import main

    model = random_cosmos(4)
    torch.save(to_checkpoint(model), tmp_path / "model.pt")
    save_config(model, tmp_path)
    np.save(tmp_path / "c.npy", np.array(PROMPT).reshape(1, 2, 3))
    args = [
        "bench",
        "--model",
        f"cosmos:{tmp_path}",
        "--methods",
        "scd-gs",
        "--window",
        "4,12",
        "--out",
        str(tmp_path / "b"),
    ]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2 and "--prompt" in res.output
    res = CliRunner().invoke(main, [*args, "--prompt", str(tmp_path / "c.npy")])
    assert res.exit_code == 0, res.output
    rows = json.loads((tmp_path / "b" / "bench.json").read_text())["rows"]
    assert {r["method"] for r in rows} >= {"ar", "scd-gs"} and len(rows[0]["acceptance"][0]) == 2 * 3
