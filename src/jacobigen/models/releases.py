"""The published checkpoints' configurations as released: what ``jacobigen plan --shape`` plans,
through the loaders' own config readers (:mod:`.shapes`), and what ``benchmarks/scale/make_checkpoint.py``
writes, so that a named plan and a checkpoint of the same release cannot drift apart."""

from __future__ import annotations

from dataclasses import dataclass, field

# Chameleon-7B's stack (Meta's release), which Lumina-mGPT 1 and 2 and Anole keep; Lumina-mGPT 2.0's
# 32 key/value heads and 10,240 positions as Ascend MindSpeed-MM's port of it states them
# (examples/lumina/mgpt2/model.json)
CHAMELEON_7B = dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                    num_key_value_heads=32, max_position_embeddings=10240, rope_theta=10000.0, rms_norm_eps=1e-5,
                    vocab_size=65536)  # fmt: skip
CHAMELEON_34B = dict(CHAMELEON_7B, hidden_size=8192, intermediate_size=22016, num_hidden_layers=48,
                     num_attention_heads=64, num_key_value_heads=8)  # fmt: skip
# Janus-Pro's language models (DeepSeek-LLM-1.5B / -7B) as transformers' Janus format stores them
# (deepseek-community/Janus-Pro-*); its JanusConfig defaults are the vision and VQ parts
JANUS_TEXT = dict(model_type="llama", vocab_size=102400, max_position_embeddings=16384, pad_token_id=100015,
                  bos_token_id=100000, eos_token_id=100001, rms_norm_eps=1e-6, tie_word_embeddings=False)  # fmt: skip


def _janus(hidden: int, mlp: int, layers: int, heads: int) -> dict:
    """JanusConfig's arguments: the image parts project onto the language model's width."""
    text = dict(JANUS_TEXT, hidden_size=hidden, intermediate_size=mlp, num_hidden_layers=layers,
                num_attention_heads=heads, num_key_value_heads=heads)  # fmt: skip
    return dict(text_config=text, vision_config=dict(projection_dim=hidden),
                vq_config=dict(projection_dim=hidden, image_token_embed_dim=hidden))  # fmt: skip


@dataclass(frozen=True)
class Release:
    family: str  # the loader: a value of jacobigen.models.families.FAMILIES
    # config.json's fields (Janus, Emu3: JanusConfig / Emu3Config arguments; {} is transformers' defaults),
    # or, for the families released as .pt files, the loader's config (LlamaGenConfig, CosmosConfig)
    config: dict = field(default_factory=dict)
    size: int = 0  # image side in pixels (0: the family's default)
    note: str = ""


RELEASES: dict[str, Release] = {
    "lumina-mgpt-7b": Release("chameleon", CHAMELEON_7B, 768,
                              "Lumina-mGPT-7B-768 (Chameleon-7B's stack), 768 px: 48 x 48 codes + end-of-line tokens"),
    "lumina-mgpt-7b-1024": Release("chameleon", CHAMELEON_7B, 1024, "Lumina-mGPT-7B-1024, 1024 px"),
    "lumina-mgpt-34b": Release("chameleon", CHAMELEON_34B, 512, "Lumina-mGPT-34B-512 (Chameleon-34B's stack), 512 px"),
    "anole-7b": Release("anole", CHAMELEON_7B, 512, "Anole-7b: 32 x 32 codes, no end-of-line tokens"),
    "lumina2-7b": Release("lumina2", dict(CHAMELEON_7B, vocab_size=172032), 768,
                          "Lumina-mGPT 2.0 (Chameleon-7B's stack, Qwen's text ids and MoVQGAN's 16,384 codes), "
                          "768 px: 96 x 96 codes + end-of-line tokens"),
    "janus-pro-7b": Release("janus", _janus(4096, 11008, 30, 32), 384, "Janus-Pro-7B: 384 px, 24 x 24 codes"),
    "janus-pro-1b": Release("janus", _janus(2048, 5632, 24, 16), 384, "Janus-Pro-1B: 384 px, 24 x 24 codes"),
    "emu3-gen": Release("emu3", {}, 720, "Emu3-Gen (8B), 720 px: 90 x 90 codes + end-of-line tokens"),
    "llamagen-xl-384": Release("llamagen", dict(dim=1280, n_layer=36, n_head=20, block_size=576), 384,
                               "LlamaGen c2i GPT-XL, 384 px: 24 x 24 codes"),
    "llamagen-3b-384": Release("llamagen", dict(dim=3200, n_layer=24, n_head=32, block_size=576), 384,
                               "LlamaGen c2i GPT-3B, 384 px: 24 x 24 codes"),
    "cosmos-4b": Release("cosmos", dict(dim=4096, n_layers=16),
                         note="Cosmos-1.0-Autoregressive-4B: 2 latent frames of 40 x 64 given, 3 sampled"),
    "cosmos-12b": Release("cosmos", dict(dim=5120, n_layers=40, head_dim=128), note="Cosmos-1.0-Autoregressive-12B"),
}  # fmt: skip
