"""Real model families on tiny random-weight configs: our decoders against each family's own path."""

from dataclasses import replace

import numpy as np
import pytest
import torch
import yaml
from click.testing import CliRunner

from jacobigen import METHODS, ConfigError, WeightsError, generate
from jacobigen.cli import main
from jacobigen.models import load_bundle
from jacobigen.models.bundle import encode_one
from tests.helpers import family_models as fm
from tests.helpers.llamagen_reference import reference_of
from tests.helpers.need import need

need("transformers")

LOSSLESS = [n for n, m in METHODS.items() if m.lossless]
CFG = 3.0


def chameleon_pipe(attn="sdpa"):
    from jacobigen.models.families.chameleon import chameleon_pipeline

    hf, tok = fm.chameleon(attn=attn)
    return hf, chameleon_pipeline(hf, tok, size=64, vq_decoder=fm.tiny_vq(64, up_attention=False))


def anole_pipe(attn="sdpa"):
    from jacobigen.models.families.anole import anole_pipeline

    hf, tok = fm.chameleon(attn=attn)
    return hf, anole_pipeline(hf, tok, fm.tiny_vq(64, up_attention=False), side=4)


def janus_pipe(attn="sdpa"):
    from jacobigen.models.families.janus import janus_pipeline

    hf, tok = fm.janus(attn=attn)
    return hf, janus_pipeline(hf, tok)


def emu3_pipe(attn="sdpa"):
    from jacobigen.models.families.emu3 import emu3_pipeline

    hf, tok = fm.emu3(attn=attn)
    return hf, emu3_pipeline(hf, tok, side=4)


def llamagen_pipe(kind):
    from jacobigen.models.families.llamagen import llamagen_pipeline

    m = fm.llamagen(kind)
    return m, llamagen_pipeline(m, fm.tiny_vq(64, l2_norm=True), fm.caption if kind == "t2i" else None)


BUILD = {
    "chameleon": chameleon_pipe,
    "anole": anole_pipe,
    "janus": janus_pipe,
    "emu3": emu3_pipe,
    "llamagen-c2i": lambda: llamagen_pipe("c2i"),
    "llamagen-t2i": lambda: llamagen_pipe("t2i"),
}
PROMPT = {"llamagen-c2i": "3"}


def prompts(pipe, name):
    """The bundle with the model its prompt conditions (LlamaGen t2i: a view holding the call's
    caption bank), and the prompt's conditional and unconditional rows."""
    model, cond, uncond = encode_one(pipe, PROMPT.get(name, "a red cat"))
    return replace(pipe, model=model), cond, uncond


@pytest.fixture(scope="module", params=list(BUILD))
def family(request):
    hf, pipe = BUILD[request.param]()
    pipe, cond, uncond = prompts(pipe, request.param)
    ar = generate(pipe.model, cond, layout=pipe.layout, method="ar", top_k=1, cfg=CFG, uncond=uncond).tokens[0]
    return request.param, hf, pipe, cond, uncond, ar


# --- the family's own decoding path as reference ------------------------------------------------


def reference(name, hf, pipe, cond, uncond):
    """Greedy CFG tokens from the family's own code (transformers generate or its own cache)."""
    lay = pipe.layout
    allowed, forced = lay.allowed(pipe.model.vocab_size), lay.forced()
    if name == "janus":
        out = hf.generate(
            torch.tensor([cond]),
            attention_mask=torch.ones(1, len(cond), dtype=torch.long),
            generation_mode="image",
            do_sample=False,
            guidance_scale=CFG,
        )
        return (out[0] + lay.image_ids[0]).tolist()
    if name == "emu3":
        lo, hi = lay.image_ids

        def allowed_fn(_, ids):
            j = ids.shape[0] - len(cond)
            return [int(forced[j])] if j < lay.length and forced[j] >= 0 else list(range(lo, hi))

        out = hf.generate(
            torch.tensor([cond]),
            max_new_tokens=lay.length,
            do_sample=False,
            guidance_scale=CFG,
            negative_prompt_ids=torch.tensor([uncond]),
            prefix_allowed_tokens_fn=allowed_fn,
        )
        return out[0, len(cond) :].tolist()
    if name in ("chameleon", "anole"):

        def step(x, cache):  # ChameleonModel + lm_head: its forward masks image ids for text generation
            with torch.no_grad():
                return hf.lm_head(hf.model(input_ids=x, cache=cache, use_cache=True).last_hidden_state)[0, -1]

        return fm.hf_greedy(step, cond, uncond, CFG, lay.length, allowed, forced)
    # LlamaGen: no transformers class; its reference GPT (LlamaGen's block stack on its checkpoint
    # keys, tests/helpers/llamagen_reference.py) recomputes the whole sequence without a cache each step
    gpt = getattr(pipe.model, "gpt", pipe.model)  # t2i: the Captioned view holds the call's bank
    ref, bank = reference_of(gpt), getattr(pipe.model, "bank", None)
    seqs, out = [list(cond), list(uncond)], []
    for _ in range(lay.length):
        with torch.no_grad():
            c, u = (ref(torch.tensor([s]), bank=bank)[0, -1] for s in seqs)
        tok = int((u + CFG * (c - u)).masked_fill(~allowed, float("-inf")).argmax())
        out.append(tok)
        for s in seqs:
            s.append(tok)
    return out


def test_greedy_ar_matches_family_reference(family):
    name, hf, pipe, cond, uncond, ar = family
    assert ar.tolist() == reference(name, hf, pipe, cond, uncond)


@pytest.mark.parametrize("name", ["chameleon", "anole", "janus", "emu3"])
def test_eager_attention_gets_the_same_mask(name):
    """Our float 4-D mask must reach eager attention unmodified, as it does SDPA."""
    hf, pipe = BUILD[name]("eager")
    pipe, cond, uncond = prompts(pipe, name)
    ar = generate(pipe.model, cond, layout=pipe.layout, method="ar", top_k=1, cfg=CFG, uncond=uncond).tokens[0]
    assert ar.tolist() == reference(name, hf, pipe, cond, uncond)
    sjd = generate(pipe.model, cond, layout=pipe.layout, method="sjd", window=8, top_k=1, cfg=CFG, uncond=uncond)
    assert torch.equal(sjd.tokens[0], ar)


def test_lossless_presets_match_ar(family):
    name, _, pipe, cond, uncond, ar = family
    for method in LOSSLESS:
        gen = generate(pipe.model, cond, layout=pipe.layout, method=method, window=8, top_k=1, cfg=CFG, uncond=uncond)
        assert torch.equal(gen.tokens[0], ar), method


def test_layout_and_decoded_size(family):
    name, _, pipe, _, _, ar = family
    lay = pipe.layout
    if name in ("chameleon", "emu3"):  # EOL after every row, then end-of-image (Emu3: EOF)
        assert ar[lay.cols : lay.rows * (lay.cols + 1) : lay.cols + 1].eq(lay.eol_id).all()
        assert int(ar[-1]) == lay.end_id and ar.numel() == lay.rows * (lay.cols + 1) + 1
    elif name == "anole":  # no EOL; <eoss> closes the grid
        assert lay.eol_id is None and int(ar[-1]) == lay.end_id and ar.numel() == lay.rows * lay.cols + 1
    else:
        assert lay.eol_id is None and lay.end_id is None and ar.numel() == lay.rows * lay.cols
    grid = lay.grid(ar[None])
    lo, hi = lay.image_ids
    assert grid.shape == (1, lay.rows, lay.cols) and grid.min() >= lo and grid.max() < hi
    img = pipe.decode(grid)[0]
    scale = 2 if name in ("janus", "emu3") else 4  # the tiny VQ decoders' upsampling
    assert img.size == (lay.cols * scale, lay.rows * scale) and img.mode == "RGB"


@pytest.mark.parametrize("method", ["sjd", "scd-mc+pac"])
def test_sampled_runs_give_valid_grids(family, method):
    name, _, pipe, _, _, _ = family
    text = PROMPT.get(name, "a red cat")
    gen, images = pipe.generate([text, text], method=method, window=8, seed=[1, 2], top_k=20)
    lay = pipe.layout
    lo, hi = lay.image_ids
    assert gen.grid.min() >= lo and gen.grid.max() < hi and len(images) == 2
    assert torch.equal(gen.tokens[:, lay.forced() >= 0], lay.forced()[lay.forced() >= 0].expand(2, -1))


def test_analyze_runs_on_the_family(family):
    """`jacobigen analyze`'s decoding measurements and its teacher-forced influence measurement run
    on each family unchanged (values are checked on the embedded model, in test_analyze.py)."""
    from jacobigen.tools.analyze import accepted_lengths, influence

    name, _, pipe, _, _, _ = family
    text = PROMPT.get(name, "a red cat")
    acc = accepted_lengths(pipe, [text], [0], 4, methods=("scd-mc",))
    assert sum(acc["scd-mc"]["histogram"].values()) > 0
    inf = influence(pipe, [text], [0], perturbations=2, window=4)
    assert all(0 <= x <= 1 + 1e-6 for x in inf["tv_by_distance"] + inf["tv_by_column_offset"])
    assert max(inf["tv_by_distance"]) > 0


def test_refilled_batches_match_each_prompt_alone(family):
    """Three prompts of different lengths through two rows: refill moves a newcomer's prefilled
    cache (and its per-row state, like LlamaGen's prompt lengths) into a finished row."""
    name, _, pipe, _, _, _ = family
    texts = ["3", "7", "1"] if name == "llamagen-c2i" else ["a red cat", "a big blue house on a hill", "sun"]
    kw = dict(method="sjd", window=8, top_k=1)
    batch, _ = pipe.generate(texts, seed=[1, 2, 3], batch_size=2, **kw)
    for i, text in enumerate(texts):
        alone, _ = pipe.generate(text, seed=i + 1, **kw)
        assert torch.equal(batch.tokens[i], alone.tokens[0]), (name, text)


# --- loading ------------------------------------------------------------------------------------


@pytest.mark.parametrize("family_name", ["chameleon", "lumina-mgpt", "anole", "janus", "emu3", "llamagen"])
def test_missing_directory_names_the_path(tmp_path, family_name):
    missing = tmp_path / "no-such-model"
    with pytest.raises(WeightsError, match=str(missing)):
        load_bundle(f"{family_name}:{missing}")


def test_hf_save_pretrained_roundtrip(tmp_path):
    for name, make, option in [
        ("chameleon", fm.chameleon, "?size=64"),
        ("janus", fm.janus, ""),
        ("emu3", fm.emu3, "?size=32"),
    ]:
        d = tmp_path / name
        hf, tok = make()
        hf.save_pretrained(d)
        tok.save_pretrained(d)
        pipe = load_bundle(f"{name}:{d}{option}", dtype="float32")  # against a float32 reference
        assert (pipe.layout.rows, pipe.layout.cols) == (4, 4)
        _, ours = BUILD[name]()
        pipe, cond, uncond = prompts(pipe, name)
        assert cond == prompts(ours, name)[1]
        a = generate(pipe.model, cond, layout=pipe.layout, method="sjd", window=8, top_k=1, cfg=CFG, uncond=uncond)
        b = generate(ours.model, cond, layout=ours.layout, method="ar", top_k=1, cfg=CFG, uncond=uncond)
        assert torch.equal(a.tokens, b.tokens), name


def test_chameleon_vqgan_checkpoint_is_found_and_decodes(tmp_path):
    hf, tok = fm.chameleon()
    hf.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    vq = fm.tiny_vq(64, up_attention=False)
    (tmp_path / "tokenizer").mkdir()
    torch.save({"state_dict": fm.to_taming_keys(vq.state_dict(), 3)}, tmp_path / "tokenizer" / "vqgan.ckpt")
    dd = {"z_channels": 32, "ch": 32, "ch_mult": [1, 1, 2], "num_res_blocks": 1, "attn_resolutions": []}
    (tmp_path / "tokenizer" / "vqgan.yaml").write_text(yaml.safe_dump({"model": {"params": {"ddconfig": dd}}}))
    pipe = load_bundle(f"chameleon:{tmp_path}?size=64")
    assert pipe.note == ""
    codes = torch.randint(0, 64, (1, 4, 4))
    grid = pipe.layout.image_ids[0] + (63 - codes)  # the tiny vocabulary maps ids in reverse
    from jacobigen.models.families.base import to_pil

    with torch.no_grad():
        want = to_pil(vq.decode_codes(codes))[0]
    assert np.array_equal(np.asarray(pipe.decode(grid)[0]), np.asarray(want))


def test_llamagen_checkpoint_roundtrip_and_cli(tmp_path):
    from jacobigen.models.families.llamagen import save_config

    m = fm.llamagen("c2i")
    torch.save({"model": fm.llamagen_state(m)}, tmp_path / "c2i_T_64.pt")
    save_config(m, tmp_path)
    vq = fm.tiny_vq(64, l2_norm=True)
    torch.save({"model": fm.to_llamagen_vq_keys(vq.state_dict())}, tmp_path / "vq_ds16_c2i.pt")
    pipe = load_bundle(f"llamagen:{tmp_path}", dtype="float32")  # against a float32 reference
    assert pipe.note == "" and (pipe.layout.rows, pipe.layout.cols) == (4, 4)
    _, ours = llamagen_pipe("c2i")
    kw = dict(method="sjd", window=8, top_k=1, cfg=4.0)
    a, img_a = pipe.generate("3", **kw)
    b, img_b = ours.generate("3", **kw)
    assert torch.equal(a.tokens, b.tokens)
    assert np.array_equal(np.asarray(img_a[0]), np.asarray(img_b[0]))
    out = tmp_path / "out.png"
    res = CliRunner().invoke(
        main,
        [
            "generate",
            "--model",
            f"llamagen:{tmp_path}",
            "3",
            "--method",
            "scd-mc+pac",
            "--window",
            "8",
            "--out",
            str(out),
            "--no-progress",
        ],
    )
    assert res.exit_code == 0, res.output
    assert out.is_file() and "step compression" in res.output


def test_llamagen_rope_is_2d_and_zero_for_condition_tokens():
    """Our rotary (halves, on each head's pair entries reordered as the name map reorders q and k rows)
    against LlamaGen's recipe written independently with complex numbers."""
    from jacobigen.models.transformer import rotate

    m = fm.llamagen("c2i")
    c = m.config
    tokens = torch.tensor([[c.vocab_size + 3, 5, 6, 7, 8, 9]])  # class token then 5 image tokens
    cos, sin = m.rope(tokens, torch.arange(6)[None], None)
    x = torch.randn(1, 1, 6, c.head_dim)  # LlamaGen's layout: pairs (0, 1), (2, 3), ...
    halves = torch.cat([torch.arange(0, c.head_dim, 2), torch.arange(1, c.head_dim, 2)])
    got = rotate(x[..., halves], cos, sin)[..., torch.argsort(halves)]
    half = c.head_dim // 2
    freqs = 1.0 / (c.rope_base ** (torch.arange(0, half, 2).float() / half))
    for t in range(6):
        if t == 0:
            assert got[0, 0, 0].abs().max() == 0
            continue
        g = t - 1
        ang = torch.cat([(g // c.grid) * freqs, (g % c.grid) * freqs])
        z = torch.view_as_complex(x[0, 0, t].reshape(-1, 2).contiguous()) * torch.polar(torch.ones_like(ang), ang)
        assert torch.allclose(got[0, 0, t], torch.view_as_real(z).flatten(), atol=1e-5)


def cached_logits(model, tokens, extra, prompt: int):
    """Logits of ``tokens`` [R, S] (``prompt`` condition tokens first) in three cached blocks (prefill,
    a window, one token)."""
    r, s = tokens.shape
    extra = {**extra, "prompt_len": torch.full((r,), prompt)}
    cache, out, start = model.new_cache(r, s), [], 0
    for block in (s - 5, 4, 1):
        pos = torch.arange(start, start + block).expand(r, block)
        mask = torch.zeros(r, 1, block, s).masked_fill(torch.arange(s) > pos[:, None, :, None], float("-inf"))
        out.append(model(tokens[:, start : start + block], pos, mask, cache, **extra))
        cache.lengths += block
        start += block
    return torch.cat(out, 1)


@pytest.mark.parametrize("kind", ["c2i", "t2i"])
def test_llamagen_logits_equal_its_reference_gpt(kind):
    """Our decoder with LlamaGen's weights mapped in, against LlamaGen's own block stack on the
    checkpoint (float32, uncached and cached, GQA); leaving the name map's q/k reordering out fails."""
    m = fm.llamagen(kind)
    c = m.config
    ref = reference_of(m)
    g = torch.Generator().manual_seed(0)
    image = torch.randint(0, c.vocab_size, (2, 10), generator=g)
    if kind == "c2i":
        cond, extra = torch.tensor([[c.vocab_size + 3], [c.vocab_size + c.num_classes]]), {}
    else:
        n = c.cls_token_num
        bank = m.cls_embedding.bank([fm.caption("a red cat"), fm.caption("a big blue house")])
        cond, extra = torch.stack([torch.arange(n) + c.vocab_size + n, torch.arange(n) + c.vocab_size]), {"bank": bank}
    tokens = torch.cat([cond, image], 1)
    with torch.no_grad():
        want = ref(tokens, **extra)
        cached = [cached_logits(model, tokens, extra, cond.shape[1]) for model in (m, ref)]
        for got in (m(tokens, **extra), *cached):
            assert torch.equal(got.isinf(), want.isinf())
            assert (got - want)[want.isfinite()].abs().max() <= 1e-4
        for i, layer in enumerate(m.backbone.layers):  # the checkpoint's rows, not reordered
            layer.attn.qkv.weight.copy_(ref.layers[i].attention.wqkv.weight)
        assert (m(tokens, **extra) - want)[want.isfinite()].abs().max() > 1e-2


def test_llamagen_t2i_bank_holds_one_calls_prompts():
    _, pipe = llamagen_pipe("t2i")
    one, _ = pipe.generate(["a red cat"] * 2, method="ar", top_k=1, seed=[0, 0])
    assert torch.equal(one.tokens[0], one.tokens[1])  # repeated prompt: same slot, same tokens
    bank = pipe.model.config.bank_prompts
    pipe.generate([f"a blue dog {i}" for i in range(bank)], method="ar", top_k=1)
    again, _ = pipe.generate("a red cat", method="ar", top_k=1, seed=0)
    assert torch.equal(again.tokens[0], one.tokens[0])  # a later call does not see stale slots
    too_many = [f"a red cat {i}" for i in range(bank + 1)]
    with pytest.raises(ConfigError, match="distinct prompts"):
        pipe.generate(too_many, method="ar")
