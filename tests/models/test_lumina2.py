"""Lumina-mGPT 2.0 (``--model lumina2:DIR``) on tiny random-weight checkpoints written in the
released file layout: our decoder against transformers' Chameleon, our MoVQGAN decoder against
diffusers' MoVQ, its token layout (row separators, the 155000 id offset) through every decoder."""

import json
import shutil

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from jacobigen import METHODS, ConfigError, WeightsError, generate
from jacobigen.cli import main
from jacobigen.models import load_bundle
from jacobigen.models.families import lumina2 as L
from jacobigen.models.families.chameleon_config import config_from_json
from jacobigen.models.movqgan import MoVQConfig, config_from_state, load_movqgan
from tests.helpers import family_models as fm
from tests.helpers import lumina2_models as lm
from tests.helpers.need import need

need("transformers")

LOSSLESS = [n for n, m in METHODS.items() if m.lossless]
TEXT = "a red cat on the mat"


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """(folder, transformers reference, MoVQGAN) of a tiny checkpoint in the released layout."""
    folder = tmp_path_factory.mktemp("Lumina-mGPT-2.0")
    hf, vq = lm.chameleon(theta=5e5), lm.movq()
    lm.write_checkpoint(folder, hf, vq)
    return folder, hf, vq


@pytest.fixture(scope="module")
def bundle(release):  # at float32, as the transformers reference it is compared with
    return load_bundle(f"lumina2:{release[0]}?size=256", dtype="float32")


def hf_logits(hf, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():  # ChameleonModel + lm_head: its forward masks image ids for text generation
        return hf.lm_head(hf.model(input_ids=ids).last_hidden_state)


# --- the decoder ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [dict(), dict(kv_heads=4, swin=True), dict(shards=2, theta=1e4)],
    ids=["gqa", "swin-norm", "two-shard-qk-norms"],
)
def test_logits_equal_transformers_chameleon(tmp_path, kw):
    """Our decoder, configured from config.json and loaded from the shards through the name map,
    gives transformers' Chameleon logits within 1e-4 (fp32), prompt and image ids alike."""
    hf = lm.chameleon(**kw)
    lm.write_checkpoint(tmp_path, hf, shards=3)
    pipe = load_bundle(f"lumina2:{tmp_path}?size=256", dtype="float32")  # against transformers in float32
    cond = pipe.encode(TEXT).cond[0]
    ids = torch.tensor([cond + [155000, 171383, 160000, 151670, 155001]])
    with torch.no_grad():
        ours = pipe.model(ids)
    assert ours.shape[-1] == lm.VOCAB
    assert (ours - hf_logits(hf, ids)).abs().max() < 1e-4
    assert ours.std() > 0.5  # peaked, context-dependent logits, not near-uniform ones


def test_the_loaded_model_keeps_the_contract(bundle):
    """The cache rule (jacobigen.core.contract) on real forwards over offset image ids."""
    from jacobigen.core.contract import conformance

    conformance(bundle.model, bundle.encode(TEXT).cond[0], [155000 + i for i in (3, 1, 4, 1, 5, 16383)])


def test_config_json_sets_the_decoder_and_refuses_what_it_does_not_compute(release):
    raw = json.loads((release[0] / "config.json").read_text())
    cfg = config_from_json(raw)
    assert (cfg.dim, cfg.n_layers, cfg.n_heads, cfg.kv_heads, cfg.hidden_dim) == (32, 2, 4, 2, 64)
    assert cfg.rope_theta == 5e5 and cfg.qk_norm == "chameleon" and cfg.max_seq_len == 10240
    five = {k: v for k, v in raw.items() if k != "rope_theta"} | {"rope_parameters": {"rope_theta": 3.0}}
    assert config_from_json(five).rope_theta == 3.0  # transformers 5 writes RoPE this way
    for bad in ({"rope_scaling": {"type": "linear", "factor": 2.0}}, {"attention_bias": True}, {"hidden_act": "gelu"}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            config_from_json(raw | bad)


# --- the image tokenizer ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cfg",
    [lm.TINY_MOVQ, MoVQConfig(codes=64, ch=32, ch_mult=(1, 2), num_res_blocks=2, attn_levels=(0, 1))],
    ids=["8x-down", "widening-attention-everywhere"],
)
def test_movqgan_pixels_equal_diffusers(cfg):
    """Our MoVQGAN decoder against diffusers' MoVQ with the same weights, within 1e-4."""
    need("diffusers")
    vq = lm.movq(cfg=cfg)
    ref = lm.diffusers_movq(vq)
    codes = torch.randint(0, cfg.codes, (2, 4, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours, theirs = vq.decode_codes(codes), lm.diffusers_decode(ref, codes)
    assert ours.shape == (2, 3, 4 * cfg.downsample, 6 * cfg.downsample)
    assert (ours - theirs).abs().max() < 1e-4 and ours.std() > 0.1


def test_movqgan_checkpoint_loads_as_released(tmp_path):
    """A ``movqgan_270M.ckpt``-style state dict (encoder keys and all) loads, its shape read from the
    tensors (the 270M release's is the default config); a missing decoder tensor is a WeightsError."""
    vq = lm.movq()
    state = lm.release_movq_state(vq)
    torch.save(state, tmp_path / "movqgan_270M.ckpt")
    loaded = load_movqgan(tmp_path / "movqgan_270M.ckpt")
    assert loaded.config == lm.TINY_MOVQ
    codes = torch.randint(0, lm.CODES, (1, 2, 2))
    with torch.no_grad():
        assert torch.equal(loaded.decode_codes(codes), vq.decode_codes(codes))
    big = {k: v for k, v in lm.release_movq_state(lm.movq(cfg=MoVQConfig(ch=32))).items()}
    assert config_from_state(big, "270M-shaped") == MoVQConfig(ch=32)  # 270M's layout, narrower
    del state["decoder.up.3.attn.1.q.weight"]
    torch.save(state, tmp_path / "broken.ckpt")
    with pytest.raises(WeightsError, match="broken.ckpt"):
        load_movqgan(tmp_path / "broken.ckpt")


# --- the released layout ----------------------------------------------------------------------------


def test_release_folder_loads_with_its_layout_prompt_and_defaults(release, bundle):
    tok = lm.tokenizer()
    lay = bundle.layout
    assert (lay.rows, lay.cols, lay.image_ids) == (32, 32, (155000, 171384))  # 256 px / 8
    assert (lay.eol_id, lay.end_id) == (151670, 151666) and lay.length == 32 * 33 + 1
    enc = bundle.encode(TEXT)
    grid = tok.convert_tokens_to_ids("<reserved08808>")  # 256 px: 8 size grids of 32 px
    header = [151665, grid, grid]
    turn = f"Generate an image of 256x256 according to the following prompt:\n{TEXT}<reserved08706>"
    assert enc.cond[0] == [151643, *tok(turn, add_special_tokens=False)["input_ids"], *header]
    assert enc.cond[0][-4] == 151671  # <reserved08706> ends the turn, then the image header
    assert enc.uncond[0] == header  # its CFG restarts the unconditional branch at <racm3:break>
    assert bundle.defaults == {"cfg": 4.0, "top_k": 4096, "temperature": 1.0} and bundle.note == ""
    assert bundle.latents.shape == (lm.CODES, 4)
    from jacobigen.models.shapes import shape_of

    assert shape_of(f"lumina2:{release[0]}").image_tokens == 96 * 97 + 1  # planned from config.json alone
    assert shape_of(f"lumina2:{release[0]}?size=256").image_tokens == lay.length
    big = load_bundle(f"lumina2:{release[0]}")  # 768 px by default: 96 x 96 codes
    assert (big.layout.rows, big.layout.cols) == (96, 96)
    assert big.encode(TEXT).uncond[0][1] == tok.convert_tokens_to_ids("<reserved08824>")


@pytest.mark.parametrize("size", [320, 1024, 64])
def test_other_sizes_are_refused(release, size):
    with pytest.raises(ConfigError, match="256, 512, 768"):
        load_bundle(f"lumina2:{release[0]}?size={size}")


def test_movqgan_is_found_where_the_readme_puts_it_or_images_are_palettes(tmp_path, release):
    hf, vq = release[1], release[2]
    lm.write_checkpoint(tmp_path / "a", hf, vq, vq_place="movqgan/270M")
    assert load_bundle(f"lumina2:{tmp_path / 'a'}?size=256").note == ""
    lm.write_checkpoint(tmp_path / "b", hf)
    pipe = load_bundle(f"lumina2:{tmp_path / 'b'}?size=256")
    assert "movqgan_270M.ckpt" in pipe.note and pipe.decode(torch.full((1, 32, 32), 155003))[0].size == (32, 32)


def test_broken_folders_are_weights_errors(tmp_path, release):
    with pytest.raises(WeightsError, match="no-such-model"):
        load_bundle(f"lumina2:{tmp_path / 'no-such-model'}")
    with pytest.raises(WeightsError, match="config.json"):
        load_bundle(f"lumina2:{tmp_path}")
    lm.write_checkpoint(tmp_path / "a", lm.chameleon())
    (tmp_path / "a" / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(WeightsError, match="model-00002-of-00002"):
        load_bundle(f"lumina2:{tmp_path / 'a'}?size=256")
    lm.write_checkpoint(tmp_path / "b", lm.chameleon())
    raw = json.loads((tmp_path / "b" / "config.json").read_text())
    (tmp_path / "b" / "config.json").write_text(json.dumps(raw | {"num_hidden_layers": 3}))
    with pytest.raises(WeightsError, match="layers.2"):
        load_bundle(f"lumina2:{tmp_path / 'b'}?size=256")


def _broken_copy(release, tmp_path, name: str, data: bytes | None):
    """The release folder with file ``name`` replaced by ``data`` (None: removed)."""
    folder = tmp_path / "broken"
    shutil.copytree(release[0], folder)
    if data is None:
        (folder / name).unlink()
    else:
        (folder / name).write_bytes(data)
    return folder


@pytest.mark.parametrize(
    "data, says",
    [
        (b"{not json", "config.json is not JSON"),
        (b"[1, 2]", "config.json holds a JSON list, not an object"),
        (b"[" * 100_000, "config.json is not JSON (maximum recursion depth"),
        ('{"model_type": "caf\u00e9"}'.encode("latin-1"), "config.json is not UTF-8 (byte 0xe9"),
        ({"num_attention_heads": 0}, "num_attention_heads must be a whole number >= 1, got 0"),
        ({"hidden_size": -32}, "hidden_size must be a whole number >= 1, got -32"),
        ({"num_hidden_layers": 0}, "num_hidden_layers must be a whole number >= 1, got 0"),
        ({"vocab_size": "many"}, "vocab_size must be a whole number >= 1, got 'many'"),
        ({"num_key_value_heads": 3}, "num_key_value_heads 3 do not divide"),
        ({"rms_norm_eps": -1.0}, "rms_norm_eps must be a finite number > 0, got -1.0"),
    ],
    ids=[
        "not-json",
        "a-list",
        "too-deep",
        "not-utf8",
        "zero-heads",
        "negative-width",
        "zero-layers",
        "text-vocab",
        "kv-heads",
        "eps",
    ],
)
def test_a_broken_config_json_is_a_weights_error_naming_the_file_and_field(release, tmp_path, data, says):
    if isinstance(data, dict):
        raw = json.loads((release[0] / "config.json").read_text())
        data = json.dumps(raw | data).encode()
    folder = _broken_copy(release, tmp_path, "config.json", data)
    with pytest.raises(WeightsError) as info:
        load_bundle(f"lumina2:{folder}?size=256")
    assert str(folder / "config.json") in str(info.value) and says in str(info.value)


def test_a_missing_tokenizer_json_is_named(release, tmp_path):
    folder = _broken_copy(release, tmp_path, "tokenizer.json", None)
    with pytest.raises(WeightsError, match="has no tokenizer.json") as info:
        load_bundle(f"lumina2:{folder}?size=256")
    assert "sentencepiece" not in str(info.value)


@pytest.mark.parametrize("cut", [0, 100, None], ids=["empty", "truncated-head", "bytes-zeroed"])
def test_a_corrupt_movqgan_is_unreadable_not_a_trust_question(release, tmp_path, cut):
    good = (release[0] / "movqgan_270M.ckpt").read_bytes()
    data = good[:cut] if cut is not None else good[:1000] + bytes(5000) + good[6000:]
    folder = _broken_copy(release, tmp_path, "movqgan_270M.ckpt", data)
    with pytest.raises(WeightsError, match="not a readable PyTorch checkpoint") as info:
        load_bundle(f"lumina2:{folder}?size=256")
    for nudge in ("trust", "weights_only", "issue"):
        assert nudge not in str(info.value)


# --- decoding -----------------------------------------------------------------------------------------


def hf_step(hf):
    def step(x, cache):
        with torch.no_grad():
            return hf.lm_head(hf.model(input_ids=x, cache=cache, use_cache=True).last_hidden_state)[0, -1]

    return step


def test_greedy_tokens_equal_transformers_on_a_small_grid(release, bundle):
    """The fast tier's version of the test below: the release's ids and offset on a 4 x 4 grid."""
    enc = bundle.encode(TEXT)
    lay = L.lumina2_layout(4, 4, {"eol": 151670, "end": 151666}, L.IMAGE_OFFSET, lm.CODES)
    cond, uncond = enc.cond[0], enc.uncond[0]
    ar = generate(bundle.model, cond, layout=lay, method="ar", top_k=1, cfg=4.0, uncond=uncond).tokens[0]
    ref = fm.hf_greedy(hf_step(release[1]), cond, uncond, 4.0, lay.length, lay.allowed(lm.VOCAB), lay.forced())
    assert ar.tolist() == ref and ar[4::5].eq(151670).all() and int(ar[-1]) == 151666
    sjd = generate(bundle.model, cond, layout=lay, method="scd-mc+pac", window=8, top_k=1, cfg=4.0, uncond=uncond)
    assert torch.equal(sjd.tokens[0], ar)


@pytest.mark.slow
def test_greedy_tokens_equal_transformers_and_separators_sit_in_place(release, bundle):
    """Greedy CFG-4 decoding on our decoder (``ar``, and ``sjd``'s cached windows) equals a greedy
    loop over transformers' Chameleon with its own DynamicCache; every row ends with the separator,
    the image with ``<eoss>``, every cell is an offset MoVQGAN code; the image decodes to 256 px."""
    hf = release[1]
    enc = bundle.encode(TEXT)
    cond, uncond, lay = enc.cond[0], enc.uncond[0], bundle.layout
    ar = generate(bundle.model, cond, layout=lay, method="ar", top_k=1, cfg=4.0, uncond=uncond).tokens[0]
    ref = fm.hf_greedy(hf_step(hf), cond, uncond, 4.0, lay.length, lay.allowed(lm.VOCAB), lay.forced())
    assert ar.tolist() == ref
    rows = ar[:-1].view(32, 33)
    assert rows[:, -1].eq(151670).all() and int(ar[-1]) == 151666
    assert rows[:, :-1].ge(155000).all() and rows[:, :-1].lt(171384).all() and rows[:, :-1].unique().numel() > 8
    sjd = generate(bundle.model, cond, layout=lay, method="sjd", window=8, top_k=1, cfg=4.0, uncond=uncond)
    assert torch.equal(sjd.tokens[0], ar)
    assert bundle.decode(lay.grid(ar[None]))[0].size == (256, 256)


@pytest.fixture(scope="module")
def ar_image(bundle):
    return np.asarray(bundle.generate(TEXT, method="ar", top_k=1, seed=3)[1][0])


@pytest.mark.slow
@pytest.mark.parametrize("method", ["ar", "scd-mc+pac+vp"])
def test_lossless_presets_write_the_ar_image_from_the_command_line(release, ar_image, tmp_path, method):
    """`jacobigen generate --model lumina2:DIR` to a PNG with `ar` and the lossless preset of the most
    parts (every preset's exactness on this layout: below); at top-k 1 each must give plain AR's
    image (the family's other defaults: cfg 4, temperature 1)."""
    out = tmp_path / f"{method}.png"
    window = [] if method == "ar" else ["--window", "8"]  # ar refuses a window
    args = ["generate", "--model", f"lumina2:{release[0]}?size=256", TEXT, "--method", method, *window]
    args += ["--dtype", "float32"]  # the bundle's (the family's default, bfloat16, rounds a block unlike a token)
    res = CliRunner().invoke(main, [*args, "--top-k", "1", "--seed", "3", "--out", str(out), "--no-progress"])
    assert res.exit_code == 0, res.output
    image = np.asarray(Image.open(out))
    assert image.shape == (256, 256, 3)
    assert np.array_equal(image, ar_image)


# --- exactness on a Lumina-mGPT 2.0 layout ---------------------------------------------------------

FAST_EXACT = ("sjd", "scd-mc+pac")


@pytest.fixture(scope="module")
def tiny_lumina2():
    """(model, layout, exact law) of a tiny Lumina-mGPT 2.0: our decoder configured from a
    config.json the way a release's is, and the family's layout scaled down to 2 x 3 codes: a row
    separator (3) after each row, ``<eoss>`` (4), a three-token image header and the image ids
    offset past every special (9..11), under the family's sampling (cfg 4, top-k 4096, T 1)."""
    from jacobigen.core.sampling import SamplingConfig
    from jacobigen.models.transformer import Transformer
    from jacobigen.tools.exactness import exact_distribution

    raw = dict(
        vocab_size=16,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=32,
        max_position_embeddings=64,
        rope_theta=5e5,
    )
    torch.manual_seed(2)
    model = Transformer(config_from_json(raw)).randomize_()
    with torch.no_grad():
        model.head.weight.mul_(0.3)  # cfg 4 sharpens: keep a few hundred sequences likely
    lay = L.lumina2_layout(2, 3, {"eol": 3, "end": 4}, offset=9, codes=3, header=(2, 13, 13))
    sampling = SamplingConfig(**L.DEFAULTS)
    exact = exact_distribution(model.eval(), lay, sampling)
    assert (exact.probs > 5 / 20_000).sum() > 300  # the test sees a spread law, not one sequence
    return model, lay, sampling, exact


@pytest.mark.parametrize(
    "method", [pytest.param(m, marks=[] if m in FAST_EXACT else pytest.mark.slow) for m in LOSSLESS if m != "ar"]
)
def test_lossless_presets_are_exact_on_a_lumina2_layout(tiny_lumina2, method):
    """Row separators, end of image, header and id offset are handled exactly: each lossless preset's
    20,000 samples pass the G-test against the enumerated AR law (tools/exactness.py)."""
    from jacobigen.tools.exactness import gof_pvalue, sample

    model, lay, sampling, exact = tiny_lumina2
    spec = METHODS[method]
    opts = {k: v for k, v in {"tree_depth": 3, "tree_width": 2}.items() if k in spec.options}
    samples = sample(model, lay, sampling, spec.build(spec.window or 6, **opts), 20_000)
    assert samples[:, [3, 7]].eq(3).all() and samples[:, 8].eq(4).all()
    assert gof_pvalue(exact, samples) > 1e-4


@pytest.mark.parametrize("mutant", ["residual-from-p", "min-acceptance"])
def test_the_lumina2_exactness_test_rejects_lossy_mutants(tiny_lumina2, mutant):
    """The test above fails a decoder that is not exact on this layout (docs/DESIGN.md §6)."""
    from jacobigen.decode.jacobi import Parts
    from jacobigen.parts.drafters import Independent
    from jacobigen.tools.exactness import gof_pvalue, sample
    from tests.helpers.mutants import MinimumAcceptance, ResidualFromTarget

    model, lay, sampling, exact = tiny_lumina2
    verifier = {"residual-from-p": ResidualFromTarget, "min-acceptance": MinimumAcceptance}[mutant]()
    samples = sample(model, lay, sampling, Parts(Independent(), verifier, 4), 20_000)
    assert gof_pvalue(exact, samples) < 1e-8
