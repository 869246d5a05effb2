"""Our own models as :class:`~jacobigen.models.bundle.ModelBundle` s (the shipped emoji models, the random
ones), and ``--model`` strings resolved to a bundle (families: :mod:`jacobigen.models.families`)."""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import replace
from pathlib import Path

import torch
from PIL import Image

from ..core.contract import default_device
from ..core.cpu import native_bf16
from ..core.errors import ConfigError, WeightsError
from ..core.layout import ImageLayout, VideoLayout
from ..core.quantize import check_mode, quantize_model
from ..decode.steps import WEIGHTS  # jacobigen/weights: package data (the shipped step tables sit there too)
from . import embedded as E
from .bundle import ModelBundle, palette_decode, rows_encoder
from .transformer import Transformer, TransformerConfig, load_transformer

VIDEO_PROMPTS = [
    "red heart drifting left",
    "sun turning slowly clockwise",
    "grinning face blinking",
    "red apple standing still",
]
EMBEDDED_PROMPTS = ["red heart", "grinning face", "red apple", "blue car", "sun", "green tree", "yellow star", "pizza"]
PROMPT_BYTES = 48  # the random model's prompt bytes, as the byte-caption emoji model's
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}  # --dtype's names
EMBEDDED_DTYPE = DTYPES[E.DTYPE]
# The shipped image models by --model name: `emoji` (trained on 13,216 emoji of four art sets:
# varied, 1.3 nats per token, the harder case for Jacobi decoding) and `emoji-names`, fitted to the
# 257 curated names (training/vocabulary.py), which draws what it is asked and is the default (issue 60).
MODELS = {"emoji": WEIGHTS, "emoji-names": WEIGHTS / "names"}
DEFAULT_MODEL = "emoji-names"
EMBEDDED = {"default": MODELS[DEFAULT_MODEL], **MODELS}
# The shipped clip models by --model name: (folder, recommended sampling). `emoji-names-video`, from
# emoji-names and trained on clips of its curated names, draws the name doing the named motion (issue 60)
# and is generate-video's default (cli/video.py); `emoji-video`, from `emoji`, the varied case.
VIDEO_MODELS = {
    "emoji-names-video": (WEIGHTS / "names-video", E.NAMES_VIDEO_SAMPLING),
    "emoji-video": (WEIGHTS / "video", E.VIDEO_SAMPLING),
}


def emoji_export(weights: Path, device: str, what: str, extra_ids: int = 0, dtype: torch.dtype = EMBEDDED_DTYPE):
    """(VQ, transformer, caption reader) of an emoji model folder, checked to belong together: the
    transformer's ids are its captions' plus ``extra_ids`` (end-of-frame for clips)."""
    from .vq import VQModel

    weights = Path(weights)
    if not (weights / "ar.safetensors").is_file():
        raise WeightsError(
            f"{weights} holds no ar.safetensors: give a folder with {what}'s ar.safetensors (and "
            f"its words.json for word captions: a training export)"
        )
    vq = VQModel.load(own_or_shipped(weights, "vq.safetensors"), device=device)
    model = load_transformer(weights / "ar.safetensors", dtype, device)
    captions = E.captions_for(weights)
    if model.vocab_size != captions.vocab_size + extra_ids:
        reader = "words.json" if isinstance(captions, E.WordCaptions) else "bytes, no words.json"
        raise WeightsError(
            f"{weights}: ar.safetensors has {model.vocab_size} token ids but its captions ({reader}) "
            f"take {captions.vocab_size}{f' plus {extra_ids}' if extra_ids else ''}; keep the files "
            f"of one training export together"
        )
    return vq, model, captions


def vq_pictures(vq, grids: torch.Tensor) -> list[Image.Image]:
    pixels = (vq.decode(grids) * 255).round().byte().permute(0, 2, 3, 1).cpu().numpy()
    return [Image.fromarray(p) for p in pixels]


def embedded_bundle(
    weights: Path = WEIGHTS, device: str = "cpu", dtype: torch.dtype = EMBEDDED_DTYPE, name: str = "emoji"
) -> ModelBundle:
    """The emoji model that ships in the package: VQ tokenizer + text-conditioned AR transformer.
    ``weights`` is a folder with ``ar.safetensors`` (and ``words.json`` for word captions,
    ``names.json`` for a model of the curated names, which also sets its recommended sampling); the
    VQ and the held-out reference come from it when it has them, else from the package. ``dtype``:
    the transformer's (the VQ decodes in float32). ``name``: what records and the server call it."""
    vq, model, captions = emoji_export(weights, device, "an emoji model", dtype=dtype)
    layout = ImageLayout(E.GRID, E.GRID, (0, E.CODEBOOK_SIZE), eol_id=E.EOL, end_id=E.EOI)
    return ModelBundle(
        name,
        model,
        layout,
        rows_encoder(captions.tokens, E.unconditional_tokens()),
        lambda grids, _=None: vq_pictures(vq, grids),
        defaults=E.sampling_for(weights),
        example_prompts=EMBEDDED_PROMPTS,
        reference=lambda: heldout_reference(own_or_shipped(Path(weights), "heldout.json").parent),
        prompt_note=captions.note,
        latents=vq.quantizer.codes().detach(),
    )


def video_bundle(
    weights: Path = WEIGHTS / "video",
    device: str = "cpu",
    dtype: torch.dtype = EMBEDDED_DTYPE,
    name: str = "emoji-video",
    sampling: dict = E.VIDEO_SAMPLING,
) -> ModelBundle:
    """An animated-emoji model: the image model's VQ decodes each frame; its captions are read like
    the image model's; end-of-frame is the first id after the captions'. Clips hold up to as many
    frames as the model's positions were trained for. ``name`` and ``sampling``: what records call
    it and its recommended sampling."""
    vq, model, captions = emoji_export(weights, device, "an animated-emoji model (training/train_video.py)", 1, dtype)
    frames = E.clip_frames(captions, model.max_seq_len)
    layout = VideoLayout(
        E.GRID, E.GRID, (0, E.CODEBOOK_SIZE), eol_id=E.EOL, end_id=E.EOI, frames=frames, eof_id=captions.vocab_size
    )

    def decode(clips: torch.Tensor, _=None) -> list[list[Image.Image]]:
        pictures = vq_pictures(vq, clips.flatten(0, 1))
        return [pictures[i : i + clips.shape[1]] for i in range(0, len(pictures), clips.shape[1])]

    return ModelBundle(
        name,
        model,
        layout,
        rows_encoder(captions.tokens, E.unconditional_tokens()),
        decode,
        defaults=dict(sampling),
        example_prompts=VIDEO_PROMPTS,
        prompt_note=captions.note,
        max_frames=frames,
        latents=vq.quantizer.codes().detach(),
    )


def random_bundle(
    seed: int = 0,
    rows: int = 16,
    cols: int = 16,
    codes: int = 1024,
    device: str = "cpu",
    dtype: torch.dtype = EMBEDDED_DTYPE,
) -> ModelBundle:
    """A random-weight model with a realistic layout: for trying the tools, not for pictures."""
    eol, boi, bos = codes, codes + 1, codes + 2
    layout = ImageLayout(rows, cols, (0, codes), eol_id=eol, header=(boi,))
    model, encode = _random_model(seed, layout, codes + 3, bos, layout.length, device, dtype)
    return ModelBundle(
        "random",
        model,
        layout,
        rows_encoder(encode, [bos]),
        lambda g, _=None: palette_decode(g, layout.image_ids),
        note="random weights: images are noise, for trying the tools; --model default draws emoji",
        prompt_note=functools.partial(E.byte_note, limit=PROMPT_BYTES),
    )


def random_video_bundle(
    seed: int = 0,
    frames: int = 4,
    side: int = 8,
    codes: int = 1024,
    max_frames: int = 8,
    device: str = "cpu",
    dtype: torch.dtype = EMBEDDED_DTYPE,
) -> ModelBundle:
    """A random-weight clip model with every structural token (end of line, frame and clip): for
    trying the video tools, not for pictures."""
    eol, boi, bos, eof, end = range(codes, codes + 5)
    layout = VideoLayout(side, side, (0, codes), eol_id=eol, end_id=end, header=(boi,), frames=frames, eof_id=eof)
    longest = replace(layout, frames=max_frames).length
    model, encode = _random_model(seed, layout, codes + 5, bos, longest, device, dtype)
    return ModelBundle(
        "random-video",
        model,
        layout,
        rows_encoder(encode, [bos]),
        lambda g, _=None: [palette_decode(clip, layout.image_ids) for clip in g],
        note="random weights: clips are noise, for trying the tools",
        prompt_note=functools.partial(E.byte_note, limit=PROMPT_BYTES),
        max_frames=max_frames,
    )


def _random_model(
    seed: int, layout: ImageLayout, byte_offset: int, bos: int, longest: int, device: str, dtype: torch.dtype
):
    """(model, encode) of a random model: fan-in scaled weights give peaked, context-dependent
    next-token laws (drawn in float32, then cast to ``dtype``); a prompt is BOS and its first UTF-8
    bytes, each ``byte_offset + b``."""
    torch.manual_seed(seed)
    model = Transformer(
        TransformerConfig(vocab_size=byte_offset + 256, dim=128, n_layers=4, n_heads=4, max_seq_len=64 + longest)
    ).randomize_()

    def encode(text: str) -> list[int]:
        return [bos, *(byte_offset + b for b in text.encode()[:PROMPT_BYTES])]

    return model.to(device, dtype).eval(), encode


def own_or_shipped(weights: Path, name: str) -> Path:
    return weights / name if (weights / name).is_file() else WEIGHTS / name


def heldout_reference(weights: Path = WEIGHTS) -> tuple[list[str], list[Image.Image]]:
    """Captions and 64x64 images of the held-out emoji shipped beside the weights (names never
    seen in training, in a fixed shuffled order; ``training/make_heldout_reference.py``)."""
    meta = json.loads((Path(weights) / "heldout.json").read_text())
    sheet = Image.open(Path(weights) / "heldout.png").convert("RGB")
    t, cols = meta["tile"], meta["columns"]
    boxes = [(j % cols * t, j // cols * t, j % cols * t + t, j // cols * t + t) for j in range(meta["count"])]
    return meta["captions"], [sheet.crop(box) for box in boxes]


DEVICE_TYPES = ("cpu", "cuda", "mps")


def present_devices() -> list[str]:
    """The devices this machine has, as ``--device`` names them."""
    cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
    mps = torch.backends.mps.is_available()
    return ["cpu", *(f"cuda:{i}" for i in range(cuda)), *(["mps"] if mps else [])]


def parse_device(device: str) -> torch.device:
    """``device`` as a torch device of a supported type (cpu, cuda, cuda:N, mps), present or not: a
    :class:`ConfigError` naming the valid ones otherwise. ``plan`` needs no more: it plans for a device
    this machine lacks."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        dev = None
    if dev is None or dev.type not in DEVICE_TYPES:
        raise ConfigError(
            f"--device {device!r} is not a device: use cpu, cuda, cuda:N or mps "
            f"(this machine has {', '.join(present_devices())})"
        )
    return dev


def resolve_device(device: str | None) -> str:
    """``device`` checked against this machine (the same error for every model); None: CUDA when
    available, else the CPU."""
    if device is None:
        return default_device()
    dev = parse_device(device)
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            why = "built without CUDA" if torch.version.cuda is None else "no GPU"
            raise ConfigError(
                f"--device {device}: CUDA is not available on this machine (torch "
                f"{torch.__version__}, {why}); use --device cpu"
            )
        if (dev.index or 0) >= count:
            raise ConfigError(f"--device {device}: this machine has {count} CUDA device(s), cuda:0..cuda:{count - 1}")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"--device {device}: MPS is not available on this machine; use --device cpu")
    return device


@functools.lru_cache(maxsize=4)
def weights_id(spec: str) -> str:
    """What job records name a model's weights by: a hash of the shipped files, the seed of the
    random model, or the checkpoint a family spec points at."""
    if spec in EMBEDDED:
        digest = hashlib.sha256()
        for name in ("ar.safetensors", "vq.safetensors", "words.json", "names.json"):
            path = own_or_shipped(EMBEDDED[spec], name)
            if path.is_file():  # words.json, names.json: only beside a model that reads them
                digest.update(path.read_bytes())
        return f"sha256:{digest.hexdigest()[:16]}"
    if spec in ("random", "random-video"):
        return f"{spec}:seed=0"
    return spec


@functools.lru_cache(maxsize=4)
def weights_provenance(spec: str) -> dict[str, str] | str:
    """What a benchmark records as the weights it ran: for a shipped model the sha256 of each
    weights file (tests/test_docs.py holds each committed result to them), else
    :func:`weights_id` (the random model's seed, or the spec of a checkpoint)."""
    folder = {**EMBEDDED, **{k: f for k, (f, _) in VIDEO_MODELS.items()}}.get(spec)
    if folder is not None:
        files = [own_or_shipped(folder, name) for name in ("ar.safetensors", "vq.safetensors")]
        return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}
    return weights_id(spec)


def check_dtype(dtype, quantize: str | None = None) -> torch.dtype | None:
    """``dtype`` (a name in :data:`DTYPES` or a torch dtype; None: the model's default) as a torch
    dtype, checked against ``quantize`` (int4 runs in bfloat16 only)."""
    if dtype is None:
        return None
    found = DTYPES.get(dtype) if isinstance(dtype, str) else dtype if dtype in DTYPES.values() else None
    if found is None:
        raise ConfigError(f"dtype must be one of {', '.join(DTYPES)} (or None: the model's default), got {dtype!r}")
    if quantize == "int4" and found != torch.bfloat16:
        raise ConfigError(f"--quantize int4 runs in bfloat16 (torchao's int4 kernel): drop --dtype {str(found)[6:]}")
    return found


def ours(spec: str) -> bool:
    """Whether ``spec`` names one of our embedded models (or a folder of one): weights shipped in float32."""
    return spec.partition(":")[0] in (*EMBEDDED, *VIDEO_MODELS)


def default_dtype(spec: str, device: str) -> torch.dtype:
    """The dtype ``spec`` loads at when none is given: a family checkpoint's, bfloat16, as released;
    the embedded models', bfloat16 on a CPU with native bf16 (faster there, measured: docs/cli.md) and
    :data:`jacobigen.models.embedded.DTYPE` elsewhere; the random (test) models', that one everywhere,
    so that their tokens do not depend on the machine."""
    if ours(spec):
        native = torch.device(device).type == "cpu" and native_bf16()
        return DTYPES[E.NATIVE_BF16_DTYPE] if native else EMBEDDED_DTYPE
    if spec.partition(":")[0] in ("random", "random-video"):
        return EMBEDDED_DTYPE
    from .families.base import default_dtype as family_dtype

    return family_dtype(device)


def load_bundle(
    spec: str = "default",
    device: str | None = None,
    trust_checkpoint: bool = False,
    quantize: str | None = None,
    dtype: str | torch.dtype | None = None,
) -> ModelBundle:
    """``default``/``emoji`` (shipped), ``emoji-names`` (shipped, fitted to the curated names),
    ``emoji:DIR`` (an emoji model export: ar.safetensors and its words.json), ``random``,
    ``random-video`` (a clip model), or ``FAMILY:PATH`` for a real model family. ``device=None`` picks
    CUDA when available; an unavailable device is a :class:`ConfigError`.
    ``trust_checkpoint`` lets a family read pickled checkpoints that hold Python objects
    (unpickling them can run code). ``quantize`` (``"int8"``, or ``"int4"`` on CUDA) quantizes the
    model's linear weights (:mod:`jacobigen.core.quantize`; checked before loading; a family with a
    streaming load quantizes each layer as it is filled, the others after loading): the bundle then
    samples the quantized model's distribution. ``dtype`` (``"float32"``, ``"bfloat16"``,
    ``"float16"``; None: :func:`default_dtype`) is the model's: the bundle samples that model's
    distribution, and lossless methods sample it exactly (``bundle.dtype`` says which)."""
    if not isinstance(spec, str):
        raise ConfigError(f"model must be a spec string such as 'default' or 'chameleon:DIR', got {spec!r}")
    device = resolve_device(device)
    check_mode(quantize, device)
    dtype = check_dtype(dtype, quantize) or default_dtype(spec, device)
    bundle = _load(spec, device, trust_checkpoint, dtype, quantize)
    quantize_model(bundle.model, quantize)  # type: ignore[arg-type]
    return bundle


def check_spec(spec: str) -> str:
    """A family spec's options (``lumina2:DIR?size=768``) checked before anything reads them (the
    memory plan reads the size before any weight loads); which option a family takes is checked
    where it loads (:func:`jacobigen.models.families.load_family`)."""
    from .families import FAMILIES, OPTIONS, model_options

    family, _, path = spec.partition(":")
    if family.lower() in FAMILIES:
        model_options(family, path.partition("?")[2], OPTIONS)
    return spec


def _load(
    spec: str, device: str, trust_checkpoint: bool, dtype: torch.dtype, quantize: str | None = None
) -> ModelBundle:
    if spec == "random":
        return random_bundle(device=device, dtype=dtype)
    if spec == "random-video":
        return random_video_bundle(device=device, dtype=dtype)
    if spec in VIDEO_MODELS:
        folder, sampling = VIDEO_MODELS[spec]
        return video_bundle(folder, device, dtype, spec, sampling)
    if spec in EMBEDDED:
        return embedded_bundle(EMBEDDED[spec], device, dtype, DEFAULT_MODEL if spec == "default" else spec)
    family, _, path = spec.partition(":")
    if family == "emoji" and path:
        return embedded_bundle(Path(path), device, dtype)
    if family == "emoji-video" and path:
        return video_bundle(Path(path), device, dtype)
    from .families import FAMILIES, load_family

    if family.lower() in FAMILIES and path:
        return load_family(family, path, device, trust_checkpoint, dtype, quantize)
    raise ConfigError(
        f"unknown model {spec!r}: use 'default', 'emoji-names', 'emoji:DIR', 'random', 'random-video' or "
        f"FAMILY:PATH with FAMILY one of {', '.join(sorted(FAMILIES))}"
    )


# The names these loaders had before a bundle was called a bundle (a ``TargetPipeline`` is the
# sampling pipeline of core.sampling): kept so that existing code runs unchanged.
load_pipeline = load_bundle
embedded_pipeline = embedded_bundle
random_pipeline = random_bundle
random_video_pipeline = random_video_bundle
video_pipeline = video_bundle
