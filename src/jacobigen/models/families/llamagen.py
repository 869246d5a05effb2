"""LlamaGen GPT (class- and text-conditional) on our decoder, its checkpoint keys mapped onto ours at load.

Architecture facts from FoundationVision/LlamaGen ``autoregressive/models/gpt.py``: Llama blocks
(``attention.wqkv`` fused [q, k, v], ``attention.wo``, ``feed_forward.w1/w2/w3`` SwiGLU with hidden
``find_multiple(int(2 * 4 * dim / 3) * ffn_dim_multiplier, 256)``, RMSNorm computed in float), 2-D RoPE
on interleaved pairs (first half of the pairs rotated by the row, second half by the column), and
condition tokens whose RoPE table rows are all zero (their queries and keys are zero vectors).
No EOL or end token. c2i: one condition token ``cls_embedding.embedding_table[label]``; the CFG row
uses the extra "null" label ``num_classes``. t2i: 120 FLAN-T5 caption embeddings through
``cls_embedding.cap_proj``, left-padded and masked; the CFG row is ``uncond_embedding`` at the same
positions.

Checkpoints, as LlamaGen ships and saves them (the released ``c2i_L_384.pt``..., its training scripts'
``{"model": ..., "args": argparse.Namespace}``), carry no config: only the tensors, sometimes the training
arguments (image_size, downsample_size) and, when saved from its vLLM server model, ``freqs_cis`` RoPE
tables (one per attention layer) with a row per condition and image position. The image grid comes
from those, in that order, else from a size in the file name; one that states none is an error, not
a guess.

Condition tokens in our single id space: ids ``< codes`` are VQ codes, ids ``codes + j`` are condition
slots (c2i: label j; t2i: row j of one call's bank of caption embeddings, which its encoded prompts
carry in a :class:`Captioned` view of the model). Masked caption padding is dropped from the prompt,
which is exact: padding is invisible to every other token and RoPE of condition tokens is zero, so
only the image tokens' grid index (position - prompt length) matters; the decoders pass each row's
prompt length (``prompt_len``, docs/DESIGN.md §5.1).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, fields
from pathlib import Path

import torch

from ...core.errors import ConfigError, WeightsError
from ...core.layout import ImageLayout
from ..bundle import ModelBundle, Prompts, palette_decode, rows_encoder
from .base import default_dtype, each_image, read_checkpoint, require_dir, to_pil
from .captions import llamagen_caption
from .llamagen_model import Captioned, LlamaGen, LlamaGenConfig, stream_checkpoint

SIZES = (256, 384, 448, 512)  # the --image-size choices of LlamaGen's scripts
DOWNSAMPLE = 16  # VQ-16: pixels per token side
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".safetensors")
HEADS = {768: 12, 1024: 16, 1280: 20, 1536: 24, 2048: 32, 2560: 40, 3200: 32, 4096: 32}  # GPT-B .. 7B
C2I_DEFAULTS = {"cfg": 4.0, "temperature": 1.0, "top_k": 2000, "top_p": None}  # sample_c2i.py's demo
T2I_DEFAULTS = {"cfg": 7.5, "temperature": 1.0, "top_k": 1000, "top_p": None}


def config_from_state(state: dict, name: str = "", args: dict | None = None, **over) -> LlamaGenConfig:
    """LlamaGen checkpoints carry no config: infer it from tensor shapes, the stored training arguments,
    the RoPE table, the file name and known sizes. ``over`` (``llamagen.json``, ``?size=``) wins."""
    args = args or {}
    dim = state["tok_embeddings.weight"].shape[1]
    n_layer = 1 + max(int(m.group(1)) for k in state if (m := re.match(r"layers\.(\d+)\.", k)))
    t2i = "cls_embedding.cap_proj.fc1.weight" in state
    kw = dict(
        dim=dim,
        n_layer=n_layer,
        n_head=HEADS.get(dim, max(1, dim // 64)),
        vocab_size=state["tok_embeddings.weight"].shape[0],
        model_type="t2i" if t2i else "c2i",
        cls_token_num=args.get("cls_token_num", 1),
    )
    if t2i:  # one uncond_embedding row per caption slot
        kw.update(
            caption_dim=state["cls_embedding.cap_proj.fc1.weight"].shape[1],
            cls_token_num=state["cls_embedding.uncond_embedding"].shape[0],
        )
    else:
        kw.update(num_classes=state["cls_embedding.embedding_table.weight"].shape[0] - 1)
    kw.update(over)
    if "block_size" not in kw:
        kw["block_size"] = image_grid(state, name, args, kw["cls_token_num"]) ** 2
    return LlamaGenConfig(**kw)


def image_grid(state: dict, name: str, args: dict, cls_token_num: int) -> int:
    """Tokens per image side: from the training arguments, the RoPE table (condition rows, then one
    row per image token), or the file name (``c2i_L_384.pt``, ``GPT-XL-c2i-384.pt``)."""
    if "image_size" in args:
        return args["image_size"] // args.get("downsample_size", DOWNSAMPLE)
    table = next((v for k, v in state.items() if k.split(".")[-1] == "freqs_cis"), None)
    if table is not None:
        side = math.isqrt(table.shape[0] - cls_token_num)
        if side * side + cls_token_num != table.shape[0]:
            raise WeightsError(
                f"{name}: its RoPE table has {table.shape[0]} rows, not {cls_token_num} "
                "condition rows plus a square image grid"
            )
        return side
    stated = [int(t) for t in re.split(r"[-_.]", name) if t.isdigit() and int(t) in SIZES]
    if len(stated) != 1:
        raise ConfigError(
            f"cannot tell the image size of LlamaGen checkpoint {name!r}: its name states no "
            f"single size ({', '.join(map(str, SIZES))}) and it stores neither its training "
            f"arguments nor a RoPE table. Pass it, e.g. llamagen:PATH?size=384"
        )
    return stated[0] // DOWNSAMPLE


def read_state(path: Path, trust: bool = False) -> tuple[dict, dict]:
    """(state dict, training arguments or {}) of a GPT checkpoint; pickled arguments need ``trust``."""
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        try:
            return load_file(str(path)), {}
        except Exception as e:
            raise WeightsError(f"cannot read LlamaGen weights {path}: {e}") from e
    ckpt = read_checkpoint(path, "LlamaGen", trust)
    args = vars(ckpt["args"]) if isinstance(ckpt, dict) and hasattr(ckpt.get("args"), "__dict__") else {}
    for key in ("model", "module", "state_dict"):  # the order of LlamaGen's sample scripts
        if isinstance(ckpt, dict) and isinstance(ckpt.get(key), dict):
            return ckpt[key], args
    return ckpt, args


def read_config(path: Path, trust: bool = False, **over) -> tuple[dict, LlamaGenConfig]:
    """(memory-mapped state, config) of a GPT checkpoint file: the config inferred from its tensors'
    shapes and arguments, with ``llamagen.json`` beside it and ``over`` on top; no tensor is read (the
    loader and the memory plan)."""
    state, args = read_state(path, trust)
    cfg_file = path.parent / "llamagen.json"
    if cfg_file.is_file():
        known = {f.name for f in fields(LlamaGenConfig)}
        over = {**{k: v for k, v in json.loads(cfg_file.read_text()).items() if k in known}, **over}
    try:
        return state, config_from_state(state, path.name, args, **over)
    except (WeightsError, ConfigError):
        raise
    except Exception as e:
        raise WeightsError(f"{path} is not a LlamaGen GPT checkpoint: {e}") from e


def load_llamagen(
    path: Path,
    device: str = "cpu",
    dtype: torch.dtype | None = None,
    trust_checkpoint: bool = False,
    quantize: str | None = None,
    **over,
) -> LlamaGen:
    """The GPT of a checkpoint file, streamed from its memory-mapped tensors (:func:`stream_checkpoint`)
    at ``dtype`` (default :func:`.base.default_dtype`), each decoder linear quantized to ``quantize``."""
    state, cfg = read_config(path, trust_checkpoint, **over)
    try:
        state = {k: v for k, v in state.items() if k.split(".")[-1] != "freqs_cis"}  # rebuilt from the grid
        return stream_checkpoint(state, cfg, path, dtype or default_dtype(device), device, quantize)
    except (WeightsError, ConfigError):
        raise
    except Exception as e:
        raise WeightsError(f"{path} is not a LlamaGen GPT checkpoint: {e}") from e


def save_config(model: LlamaGen, directory: Path) -> None:
    (directory / "llamagen.json").write_text(json.dumps(asdict(model.config), indent=1))


# --- the bundle -----------------------------------------------------------------------------------


def llamagen_pipeline(
    model: LlamaGen, vq=None, caption_fn=None, missing_vq: str = "no VQ checkpoint (vq_ds16_*.pt) found"
) -> ModelBundle:
    """c2i prompts are class labels ("207" or "class 207"); t2i prompts are text, embedded by
    ``caption_fn(text) -> [valid, caption_dim]`` (FLAN-T5-XL, padding dropped), given each prompt
    cleaned as LlamaGen's training cleaned its captions (:mod:`.captions`)."""
    c = model.config
    layout = ImageLayout(c.grid, c.grid, (0, c.vocab_size))

    def decode(grids, _=None):
        if vq is None:
            return palette_decode(grids, (0, c.vocab_size))
        return to_pil(each_image(vq.decode_codes, grids), rounded=True)

    note = "" if vq is not None else f"{missing_vq}: images are token palettes"
    if c.model_type == "c2i":

        def encode(text: str) -> list[int]:
            m = re.fullmatch(r"\s*(?:class\s*)?(\d+)\s*", text)
            if not m or int(m.group(1)) >= c.num_classes:
                raise ConfigError(f"LlamaGen c2i prompts are ImageNet class ids 0..{c.num_classes - 1}, got {text!r}")
            return [c.vocab_size + int(m.group(1))]

        return ModelBundle(
            "llamagen-c2i",
            model,
            layout,
            rows_encoder(encode, [c.vocab_size + c.num_classes]),
            decode,
            dict(C2I_DEFAULTS),
            note=note,
        )

    if caption_fn is None:
        raise WeightsError("LlamaGen t2i needs its FLAN-T5-XL text encoder (a t5 directory beside the checkpoint)")
    n = c.cls_token_num

    def encode_batch(texts: list[str]) -> Prompts:
        """Each distinct prompt takes one bank slot; its unconditional row is ``uncond_embedding`` at
        the same positions."""
        captions = {t: caption_fn(llamagen_caption(t))[:n] for t in dict.fromkeys(texts)}
        bank = model.cls_embedding.bank(list(captions.values()))
        first = {t: c.vocab_size + (slot + 1) * n for slot, t in enumerate(captions)}
        cond = [[first[t] + i for i in range(captions[t].shape[0])] for t in texts]
        uncond = [[c.vocab_size + i for i in range(n - captions[t].shape[0], n)] for t in texts]
        return Prompts(texts, cond, uncond, Captioned(model, bank))

    return ModelBundle("llamagen-t2i", model, layout, encode_batch, decode, dict(T2I_DEFAULTS), note=note)


def t5_caption_fn(t5_dir: Path, device: str, max_length: int = 120):
    """FLAN-T5 embeddings of a prompt, padding dropped (LlamaGen left-pads and masks it)."""
    from transformers import AutoTokenizer, T5EncoderModel

    from .base import load_hf, offline

    offline()
    tok = AutoTokenizer.from_pretrained(str(t5_dir), local_files_only=True)
    enc = load_hf(T5EncoderModel, t5_dir, "FLAN-T5", device)

    @torch.inference_mode()
    def fn(text: str) -> torch.Tensor:
        ids = tok(text, max_length=max_length, truncation=True, return_tensors="pt").to(device)
        return enc(**ids).last_hidden_state[0].float()

    return fn


def load(
    path: str | Path,
    device: str = "cpu",
    size: int | None = None,
    trust_checkpoint: bool = False,
    dtype: torch.dtype | None = None,
    quantize: str | None = None,
) -> ModelBundle:
    """``path``: a GPT checkpoint file, or a directory holding exactly one (c2i_*/t2i_* .pt or
    .safetensors). Beside it: the VQ of the same task (``vq_ds16_c2i.pt`` or ``vq_ds16_t2i.pt``) and,
    for t2i, FLAN-T5-XL in ``t5``/``flan-t5-xl``/``t5-ckpt/flan-t5-xl``. ``size``: image side in
    pixels, for a checkpoint that does not tell it. ``dtype``, ``quantize``: see :func:`load_llamagen`."""
    ckpt = gpt_checkpoint(Path(path).expanduser())
    root = ckpt.parent
    over = {"block_size": (size // DOWNSAMPLE) ** 2} if size else {}
    model = load_llamagen(ckpt, device, dtype, trust_checkpoint, quantize, **over)
    from .vq import load_llamagen_vq

    kind = model.config.model_type
    vq_file = root / f"vq_ds{DOWNSAMPLE}_{kind}.pt"
    vq = load_llamagen_vq(vq_file, device, trust_checkpoint) if vq_file.is_file() else None
    caption_fn = None
    if kind == "t2i":
        t5 = next((root / d for d in ("t5", "flan-t5-xl", "t5-ckpt/flan-t5-xl") if (root / d).is_dir()), None)
        if t5 is None:
            raise WeightsError(f"LlamaGen t2i needs FLAN-T5-XL in {root}/t5 (or flan-t5-xl)")
        caption_fn = t5_caption_fn(t5, device)
    others = ", ".join(f.name for f in sorted(root.glob("vq*.pt")))
    missing = f"no {vq_file.name} beside the checkpoint" + (
        f" ({others} not used: another tokenizer)" if others else ""
    )
    return llamagen_pipeline(model, vq, caption_fn, missing)


def gpt_checkpoint(p: Path) -> Path:
    """The GPT checkpoint ``p`` names: the file itself, or the one GPT file of a directory. LlamaGen's
    ``pretrained_models/`` often holds several (c2i and t2i, several sizes): then the file is asked for."""
    if p.is_file():
        return p
    root = require_dir(p, "LlamaGen")
    found = sorted(f for f in root.iterdir() if f.suffix in CHECKPOINT_SUFFIXES and not f.name.startswith("vq"))
    if not found:
        raise WeightsError(f"no LlamaGen GPT checkpoint (*.pt, *.safetensors) in {root}")
    if len(found) > 1:
        raise ConfigError(
            f"{root} holds {len(found)} GPT checkpoints ({', '.join(f.name for f in found)}): "
            f"name the one to load, e.g. llamagen:{found[0]}"
        )
    return found[0]
