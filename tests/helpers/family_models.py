"""Tiny random-weight models of each real family, with tokenizers, for fast tests."""

from __future__ import annotations

import torch

WORDS = [
    "a",
    "red",
    "cat",
    "on",
    "the",
    "mat",
    "dog",
    "Generate",
    "an",
    "image",
    "of",
    "according",
    "to",
    "following",
    "prompt",
    ":",
    "User",
    "Assistant",
    "USER",
    "ASSISTANT",
]


def word_tokenizer(vocab: dict[str, int], specials: list[str], **named):
    """A whitespace WordLevel tokenizer over ``vocab`` whose ``specials`` split out of any text."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace()])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", **named)
    fast.add_special_tokens({"additional_special_tokens": specials})
    return fast


def _words(vocab: dict[str, int], start: int) -> int:
    for w in WORDS:
        vocab[w] = start
        start += 1
    return start


# --- Chameleon / Lumina-mGPT ----------------------------------------------------------------------


def chameleon(codes: int = 64, seed: int = 0, attn: str = "sdpa"):
    """A 2-layer Chameleon whose image ids 4..4+codes map to VQ codes in reverse order."""
    from transformers import ChameleonConfig, ChameleonForConditionalGeneration

    from jacobigen.models.families.chameleon import IMAGE_END, IMAGE_START, NEW_LINE, TURN_END, grid_token

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
    for i in range(codes):
        code = codes - 1 - i
        vocab["IMGIMG" + "".join(chr(ord("A") + int(d)) for d in str(code)) + "Z"] = 4 + i
    nxt = 4 + codes
    specials = [IMAGE_START, IMAGE_END, NEW_LINE, TURN_END] + [grid_token(n) for n in range(1, 33)]
    for s in specials:
        vocab[s] = nxt
        nxt += 1
    nxt = _words(vocab, nxt)
    torch.manual_seed(seed)
    cfg = ChameleonConfig(
        vocab_size=nxt,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        vocabulary_map=dict(vocab),
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        vq_config=dict(
            embed_dim=8,
            num_embeddings=codes,
            latent_channels=8,
            base_channels=32,
            channel_multiplier=[1, 1],
            num_res_blocks=1,
            resolution=32,
        ),
    )
    cfg._attn_implementation = attn
    model = ChameleonForConditionalGeneration(cfg).eval()
    return model, word_tokenizer(vocab, specials, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


def tiny_vq(codes: int, embed_dim: int = 8, l2_norm: bool = False, up_attention: bool = True, seed: int = 1):
    from jacobigen.models.families.vq import VQDecoder

    torch.manual_seed(seed)
    return VQDecoder(
        codes,
        embed_dim,
        z_channels=32,
        base_channels=32,
        channel_multiplier=(1, 1, 2),
        num_res_blocks=1,
        l2_norm=l2_norm,
        up_attention=up_attention,
    ).eval()


def hf_greedy(
    step, cond: list[int], uncond: list[int] | None, cfg: float, n: int, allowed, forced, embed_next=None
) -> list[int]:
    """Reference greedy decoding with the model's own DynamicCache: ``step(ids_or_embeds, cache)`` ->
    last logits; cond and uncond run as separate unpadded batches, combined like CFG."""
    from transformers import DynamicCache

    caches = [DynamicCache(), DynamicCache() if uncond is not None else None]
    inputs = [torch.tensor([cond]), torch.tensor([uncond]) if uncond is not None else None]
    out = []
    for j in range(n):
        logits = [step(x, c) for x, c in zip(inputs, caches, strict=True) if x is not None]
        z = logits[0] if len(logits) == 1 else logits[1] + cfg * (logits[0] - logits[1])
        z = z.float().masked_fill(~allowed, float("-inf"))
        tok = int(forced[j]) if forced[j] >= 0 else int(z.argmax())
        out.append(tok)
        inputs = [torch.tensor([[tok]]) if x is not None else None for x in inputs]
    return out


# --- Janus ----------------------------------------------------------------------------------------


def janus(codes: int = 64, side: int = 4, seed: int = 0, attn: str = "sdpa"):
    """A 2-layer Janus whose image mode makes a side x side grid over ``codes`` VQ codes."""
    from transformers import JanusConfig, JanusForConditionalGeneration

    from jacobigen.models.families.janus import IMAGE_START

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
    specials = [IMAGE_START, "<|User|>", "<|Assistant|>", "<image_placeholder>"]
    for s in specials:
        vocab[s] = len(vocab)
    n = _words(vocab, len(vocab))
    torch.manual_seed(seed)
    hidden = 64
    cfg = JanusConfig(
        text_config=dict(
            model_type="llama",
            vocab_size=n,
            hidden_size=hidden,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
        ),
        vision_config=dict(
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=16 * side,
            patch_size=16,
            projection_dim=hidden,
            num_image_tokens=side * side,
            mlp_ratio=2.0,
        ),
        vq_config=dict(
            embed_dim=8,
            num_embeddings=codes,
            latent_channels=32,
            base_channels=32,
            channel_multiplier=[1, 1],
            num_res_blocks=1,
            projection_dim=hidden,
            image_token_embed_dim=hidden,
        ),
        image_token_id=vocab["<image_placeholder>"],
    )
    cfg.text_config._attn_implementation = attn
    model = JanusForConditionalGeneration(cfg).eval()
    with torch.no_grad():  # default init makes every image token the same: spread the heads out
        for p in [*model.model.generation_head.parameters(), *model.model.generation_embeddings.parameters()]:
            p.normal_(0, 0.5)
    model.generation_config.pad_token_id = 0
    model.generation_config.bos_token_id = 1
    model.generation_config.generation_kwargs = {"boi_token_id": vocab[IMAGE_START]}
    return model, word_tokenizer(vocab, specials, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


# --- Emu3 -----------------------------------------------------------------------------------------


def emu3(codes: int = 64, seed: int = 0, attn: str = "sdpa"):
    """A 2-layer Emu3 whose visual tokens are contiguous ids; tiny temporal VQ-VAE."""
    from transformers import Emu3Config, Emu3ForConditionalGeneration

    from jacobigen.models.families.emu3 import NAMES

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
    specials = list(NAMES.values()) + ["<|image end|>", "<image>"]
    for s in specials:
        vocab[s] = len(vocab)
    start = len(vocab)
    for i in range(codes):
        vocab[f"<|visual token {i:06d}|>"] = start + i
    n = _words(vocab, start + codes)
    for w in ["*", ",", ".", "4", "masterpiece", "lowres"]:
        vocab.setdefault(w, n)
        n = max(n, vocab[w] + 1)
    torch.manual_seed(seed)
    cfg = Emu3Config(
        text_config=dict(
            vocab_size=n,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            attention_dropout=0.0,
        ),
        vq_config=dict(
            codebook_size=codes,
            embed_dim=4,
            latent_channels=4,
            base_channels=32,
            channel_multiplier=[1, 2],
            num_res_blocks=1,
            attn_resolutions=[],
            hidden_size=64,
            num_attention_heads=1,
            temporal_downsample_factor=4,
        ),
        vocabulary_map=dict(vocab),
    )
    cfg.text_config._attn_implementation = attn
    model = Emu3ForConditionalGeneration(cfg).eval()
    return model, word_tokenizer(vocab, specials, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


# --- LlamaGen -------------------------------------------------------------------------------------

LLAMAGEN_ARCH = dict(
    dim=64,
    n_layer=2,
    n_head=4,
    n_kv_head=2,
    multiple_of=32,
    vocab_size=64,
    num_classes=10,
    caption_dim=16,
    bank_prompts=4,
)


def llamagen(model_type: str = "c2i", seed: int = 0, **over):
    from jacobigen.models.families.llamagen_model import LlamaGen, LlamaGenConfig

    torch.manual_seed(seed)
    c = LlamaGenConfig(
        **{
            **LLAMAGEN_ARCH,
            "block_size": 16,
            "model_type": model_type,
            "cls_token_num": 6 if model_type == "t2i" else 1,
            **over,
        }
    )
    m = LlamaGen(c).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.3)
        if model_type == "t2i":
            m.cls_embedding.uncond_embedding.normal_()
    return m


def llamagen_state(model) -> dict:
    """A LlamaGen model's weights as LlamaGen's checkpoints hold them (its names and layout)."""
    from jacobigen.models.families.llamagen_model import to_checkpoint

    return to_checkpoint(model)


def caption(text: str) -> torch.Tensor:
    """Stand-in for FLAN-T5: one deterministic 16-d row per word."""
    return torch.randn(len(text.split()), 16, generator=torch.Generator().manual_seed(len(text)))


def to_llamagen_vq_keys(state: dict) -> dict:
    """Our VQDecoder keys -> LlamaGen VQModel keys (the inverse of the loader's mapping)."""
    import re

    out = {}
    for k, v in state.items():
        if k == "embedding.weight":
            k = "quantize.embedding.weight"
        k = re.sub(r"^decoder\.up\.(\d+)\.block\.", r"decoder.conv_blocks.\1.res.", k)
        k = re.sub(r"^decoder\.up\.(\d+)\.", r"decoder.conv_blocks.\1.", k)
        for i, name in enumerate(("block_1", "attn_1", "block_2")):
            k = k.replace(f"decoder.mid.{name}.", f"decoder.mid.{i}.")
        out[k] = v
    return out


def to_taming_keys(state: dict, levels: int) -> dict:
    import re

    out = {}
    for k, v in state.items():
        if k == "embedding.weight":
            k = "quantize.embedding.weight"
        m = re.match(r"^decoder\.up\.(\d+)\.(.*)$", k)
        if m:
            k = f"decoder.up.{levels - 1 - int(m.group(1))}.{m.group(2)}"
        out[k] = v
    return out


def llamagen_arch_json(directory) -> None:
    """What the shapes cannot tell about the tiny GPTs (heads, FFN rounding), as ``llamagen.json``."""
    import json

    arch = {k: LLAMAGEN_ARCH[k] for k in ("n_head", "n_kv_head", "multiple_of", "bank_prompts")}
    (directory / "llamagen.json").write_text(json.dumps(arch))


def tiny_t5(directory, dim: int = 16) -> None:
    """A one-layer T5 encoder and word tokenizer saved where LlamaGen t2i looks for FLAN-T5."""
    from transformers import T5Config, T5EncoderModel

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2}
    _words(vocab, 3)
    torch.manual_seed(2)
    T5EncoderModel(
        T5Config(vocab_size=len(vocab), d_model=dim, d_kv=8, d_ff=32, num_layers=1, num_heads=2)
    ).save_pretrained(directory)
    word_tokenizer(vocab, [], eos_token="</s>", pad_token="<pad>").save_pretrained(directory)
