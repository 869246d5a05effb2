"""Lumina-mGPT 2.0 (``Alpha-VLLM/Lumina-mGPT-2.0``): a 7B Chameleon-shaped decoder trained from
scratch, with SBER-MoVQGAN 270M as its image tokenizer. Read from the checkpoint folder itself, with
no transformers model class: ``config.json`` configures our decoder, the safetensors shards (through
``model.safetensors.index.json``) load through a name map, the tokenizer files give the special ids.

Image format (its ``data/item_processor.py`` and ``inference_solver.py``): ``<racm3:break>``, two
size tokens ``<reserved{8800+n}>`` for the height and width in 32-pixel grids, then rows of 4n codes
(MoVQGAN downsamples by 8), each followed by ``<reserved08799>``, then ``<eoss>``. Code ``c`` is id
``155000 + c`` (16,384 codes: ids 155000..171383, the only ids its sampler lets an image cell take).
The prompt is its chat turn: BOS (the tokenizer's, else its EOS, as xllmx's ``Tokenizer`` picks),
``Generate an image of {w}x{h} according to the following prompt:\\n{text}`` and ``<reserved08706>``
(end of turn); we append the image header. CFG's unconditional row is the header alone (its CFG
processor restarts the unconditional branch at the image-start token).

Differences we chose: its model samples the header itself (text top-k 10) and we force it to the
requested size; its CFG processor rescales each step, ``cfg = max(4, cfg * (1 - done / cells))``,
so every cfg but 1 acts as at least 4 there and its recommended cfg 4 (our default) is exactly 4
throughout, while we keep any given cfg constant.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import torch

from ...core.contract import ImageModel
from ...core.errors import ConfigError, WeightsError
from ...core.layout import ImageLayout
from ..bundle import ModelBundle, palette_decode, rows_encoder
from ..movqgan import MOVQGAN_270M, MoVQDecoder, load_movqgan
from ..transformer import Transformer
from .base import default_dtype, each_image, load_tokenizer, require_dir, to_pil, token_id
from .chameleon import IMAGE_END, IMAGE_START, NEW_LINE, PROMPT, TURN_END, grid_token
from .chameleon_config import names, read_config
from .convert import per_head
from .stream import Checkpoint, stream_decoder

IMAGE_OFFSET = 155000  # id of MoVQGAN code 0 (item_processor.get_image_token)
PATCH = 32  # pixels per size-token grid
DOWNSAMPLE = 8  # MoVQGAN: pixels per code
SIZES = (256, 512, 768)  # 768: the released text-to-image size; 512: Omni's panels; 256: generate.py's default
DEFAULTS = {"cfg": 4.0, "top_k": 4096, "temperature": 1.0}  # its README and scripts/sample.sh
VQ_PLACES = (
    "movqgan_270M.ckpt",
    "movqgan/270M/movqgan_270M.ckpt",
    "270M/movqgan_270M.ckpt",
    "movqgan/movqgan_270M.ckpt",
)


# --- the decoder -----------------------------------------------------------------------------------


def load_decoder(
    path: Path, dtype: torch.dtype, device: str | torch.device, quantize: str | None = None
) -> Transformer:
    """Our decoder with the checkpoint's weights, streamed (:mod:`.stream`): q/k/v and gate/up fused,
    q/k norms stored per model-parallel shard (``[model_parallel_size, head_dim]``) repeated over
    their heads as its ``ChameleonLayerNorm`` does, each linear layer quantized as it is filled."""
    cfg = read_config(path)

    def fix(key: str, t: torch.Tensor) -> torch.Tensor:
        if ".attn.q_norm." in key or ".attn.k_norm." in key:
            return per_head(t, cfg.n_heads if ".q_norm." in key else cfg.kv_heads, key)
        return t

    return stream_decoder(cfg, names(cfg), Checkpoint(path), dtype, device, quantize, fix)


# --- the bundle ------------------------------------------------------------------------------------


def lumina2_layout(rows: int, cols: int, ids: dict[str, int], offset: int, codes: int, header=()) -> ImageLayout:
    """``rows`` x ``cols`` codes (4 per 32-px size grid), each row ended by ``ids['eol']``, the image
    by ``ids['end']``; cells take ids [offset, offset + codes). The bundle puts the image header in
    its prompts; ``header`` puts it in the layout instead (for the exactness harness)."""
    return ImageLayout(rows, cols, (offset, offset + codes), eol_id=ids["eol"], end_id=ids["end"], header=tuple(header))


def check_size(size: int) -> int:
    if size not in SIZES:
        raise ConfigError(
            f"Lumina-mGPT 2.0 makes square images of {', '.join(map(str, SIZES))} px "
            f"(768 is its release size), not {size}"
        )
    return size // PATCH


def lumina2_pipeline(
    model: Transformer,
    tokenizer,
    size: int = 768,
    vq: MoVQDecoder | None = None,
    offset: int = IMAGE_OFFSET,
    codes: int = MOVQGAN_270M.codes,
) -> ModelBundle:
    """The bundle for a ``size`` x ``size`` image (one of :data:`SIZES`)."""
    grids = check_size(size)
    ids = {k: token_id(tokenizer, t) for k, t in (("start", IMAGE_START), ("end", IMAGE_END), ("eol", NEW_LINE))}
    header = [ids["start"], token_id(tokenizer, grid_token(grids)), token_id(tokenizer, grid_token(grids))]
    if offset + codes > model.vocab_size:
        raise WeightsError(
            f"image ids {offset}..{offset + codes - 1} do not fit the model's {model.vocab_size} ids: "
            "is this a Lumina-mGPT 2.0 checkpoint?"
        )
    if vq is not None and (vq.config.codes, vq.config.downsample) != (codes, DOWNSAMPLE):
        raise WeightsError(
            f"the MoVQGAN has {vq.config.codes} codes at {vq.config.downsample}x downsampling; "
            f"Lumina-mGPT 2.0 needs {codes} at {DOWNSAMPLE}x (SBER-MoVQGAN 270M)"
        )
    side = grids * PATCH // DOWNSAMPLE
    layout = lumina2_layout(side, side, ids, offset, codes)
    if len(header) + layout.length + 64 > model.max_seq_len:  # 64: room for the prompt
        raise ConfigError(
            f"a {size} px image takes {layout.length} tokens, past the model's {model.max_seq_len} positions"
        )
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id

    def encode(text: str) -> list[int]:
        turn = PROMPT.format(w=size, h=size, text=text) + TURN_END
        return [bos, *tokenizer(turn, add_special_tokens=False)["input_ids"], *header]

    def decode(grids_: torch.Tensor, _=None):
        if vq is None:
            return palette_decode(grids_, layout.image_ids)
        pixels = each_image(vq.decode_codes, grids_.cpu() - offset)
        return to_pil(pixels, rounded=True)  # its show_images: ((x + 1) * 127.5).round()

    return ModelBundle(
        "lumina2",
        cast(ImageModel, model),  # Transformer keeps the contract (read-only vocab_size, max_seq_len)
        layout,
        rows_encoder(encode, header),
        decode,
        dict(DEFAULTS),
        note="" if vq is not None else "no movqgan_270M.ckpt found: images are token palettes",
        latents=None if vq is None else vq.codebook.detach().float().cpu(),
    )


def find_movqgan(path: Path) -> Path | None:
    """``movqgan_270M.ckpt`` in the folder, or where Lumina-mGPT 2.0's README puts it (relative to
    the folder: ``movqgan/270M/``)."""
    return next((path / p for p in VQ_PLACES if (path / p).is_file()), None)


def check_folder(folder: Path) -> Path:
    """The files every Lumina-mGPT 2.0 folder needs, there before any weight is read (without
    ``tokenizer.json`` transformers would fall back to a slow tokenizer and ask for sentencepiece)."""
    for name in ("config.json", "tokenizer.json"):
        if not (folder / name).is_file():
            raise WeightsError(
                f"{folder} has no {name}: is it a Lumina-mGPT 2.0 checkpoint folder (Alpha-VLLM/Lumina-mGPT-2.0)?"
            )
    return folder


def load(
    path: str | Path,
    device: str = "cpu",
    size: int | None = None,
    trust_checkpoint: bool = False,
    dtype: torch.dtype | None = None,
    quantize: str | None = None,
) -> ModelBundle:
    """``size``: image side in pixels (default 768). ``dtype``: the weights' (default: :func:`.base.default_dtype`);
    ``quantize``: int8/int4 linear weights, each quantized as it loads (checked by the caller)."""
    check_size(size or 768)  # refuse a bad size before reading gigabytes
    folder = check_folder(require_dir(path, "Lumina-mGPT 2.0"))
    model = load_decoder(folder, dtype or default_dtype(device), device, quantize)
    tokenizer = load_tokenizer(folder, "Lumina-mGPT 2.0")
    ckpt = find_movqgan(folder)
    vq = load_movqgan(ckpt, device, trust_checkpoint) if ckpt else None
    return lumina2_pipeline(model, tokenizer, size or 768, vq)
