"""Random test models with realistic vocabularies."""

import torch

from jacobigen.core.layout import ImageLayout
from jacobigen.models.transformer import Transformer, TransformerConfig

CODES = 4096
LAYOUT = ImageLayout(16, 16, (0, CODES), eol_id=CODES, end_id=CODES + 1)
PROMPT, UNCOND = [CODES + 2, 7, 9], [CODES + 2]


def random_model(seed: int = 0, dim: int = 64, layers: int = 2) -> Transformer:
    torch.manual_seed(seed)
    cfg = TransformerConfig(vocab_size=CODES + 3, dim=dim, n_layers=layers, n_heads=4, max_seq_len=320)
    return Transformer(cfg).eval()
