"""The model contract: what every model behind the decoders implements, written down and checked.

The decoders (and every family adapter) rely on one small interface (docs/DESIGN.md §5.1). It is
stated here as a typed :class:`ImageModel` Protocol; :func:`check_model` turns the cheap parts of it
into ConfigErrors at decoder construction, and :func:`conformance` checks the behavioural parts (the
cache rule) on a real forward, for the shared test every family runs (``tests/core/test_contract.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import torch

from .cache import KVCache
from .errors import ConfigError
from .masks import block_mask, causal, prefix_structure


class ImageModel(Protocol):
    """An autoregressive token model as the decoders drive it.

    ``vocab_size``: columns of the logits; every prompt, image and structural id is below it.
    ``max_seq_len``: the longest sequence (prompt + generated tokens) the model takes. Decoders refuse
    longer requests with a ConfigError and never send a position ``>= max_seq_len`` (slots a block
    holds past the image end, whose outputs are discarded, get the last valid position).

    ``new_cache(rows, capacity)`` returns a :class:`~jacobigen.core.cache.KVCache` with all lengths
    zero, on the model's device, ``capacity`` slots per row.

    ``model(tokens, positions, mask, cache) -> logits``:

    - ``tokens`` [R, T] int64, ``positions`` [R, T] int64 (absolute positions, for RoPE); a prefill
      right-pads shorter prompts with id 0, which only the padding itself sees;
    - ``mask`` [R, 1, T, C] additive float (0 visible, -inf hidden) over all ``C = cache.capacity``
      slots, or None together with ``cache=None`` (then: plain causal attention over the block);
    - returns float32 logits [R, T, vocab_size].

    The cache rule: each attention layer writes the block's keys/values with
    ``cache.update(layer, k, v)``, which stores token ``t`` of row ``r`` at slot
    ``cache.lengths[r] + t``, and attends over all the slots it returns under ``mask``. The model never
    changes ``cache.lengths`` and keeps no cache of its own: the decoder decides which of the block's
    entries survive (``cache.commit``) after verification.

    ``parameters()`` yields at least one tensor: the decoders take the device from the first.

    Optional: a model whose positions alone do not tell where its image starts (LlamaGen's 2-D RoPE
    counts image tokens from the end of prompts of different lengths) sets ``needs_prompt_len =
    True``; every forward then also gets ``prompt_len`` [R], each row's prompt length (header
    included), from :func:`prompt_lengths`.
    """

    vocab_size: int
    max_seq_len: int

    def new_cache(self, rows: int, capacity: int) -> KVCache: ...

    def __call__(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
    ) -> torch.Tensor: ...

    def parameters(self) -> Iterator[torch.nn.Parameter]: ...


def prompt_lengths(model: ImageModel, lengths: torch.Tensor) -> dict:
    """The keyword arguments that hand ``lengths`` [R] to a model that needs them (none otherwise)."""
    return {"prompt_len": lengths} if getattr(model, "needs_prompt_len", False) else {}


def default_device() -> str:
    """The device a model loads on when none is named: CUDA when available, else the CPU."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def sync(device: torch.device) -> None:
    """Wait for an accelerator's queued work (a no-op on the CPU), for honest timings."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def model_device(model: ImageModel) -> torch.device:
    """The device of the model's first parameter; a model without one gets a ConfigError rather than
    a bare StopIteration from deep inside the decoder."""
    first = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
    if first is None:
        raise ConfigError(
            f"{type(model).__name__} has no parameters: the decoders take the device from the "
            "model's first parameter, so register at least one (an nn.Module with weights)"
        )
    return first.device


def model_dtype(model) -> str | None:
    """The dtype of the model's floating-point weights as ``--dtype`` names it (``"bfloat16"``), None
    for a model without any: what a run records as the dtype of the model it sampled."""
    params = model.parameters() if hasattr(model, "parameters") else ()
    first = next((p for p in params if p.is_floating_point()), None)
    return None if first is None else str(first.dtype).removeprefix("torch.")


def check_model(model: ImageModel) -> torch.device:
    """The contract's static part, checked before decoding: members, sizes, the cache type.
    Returns the model's device."""
    for name in ("vocab_size", "max_seq_len"):
        value = getattr(model, name, None)
        if not isinstance(value, int) or value < 1:
            raise ConfigError(
                f"{type(model).__name__}.{name} must be a positive int, got {value!r} "
                "(see jacobigen.core.contract.ImageModel)"
            )
    device = model_device(model)
    if not callable(getattr(model, "new_cache", None)):
        raise ConfigError(
            f"{type(model).__name__} has no new_cache(rows, capacity) (see jacobigen.core.contract.ImageModel)"
        )
    cache = model.new_cache(1, 1)
    if not isinstance(cache, KVCache):
        raise ConfigError(
            f"{type(model).__name__}.new_cache must return a jacobigen.core.cache.KVCache, got "
            f"{type(cache).__name__}: the decoders commit and roll back through its methods"
        )
    return device


def check_layout_type(layout) -> None:
    from .layout import ImageLayout

    if not isinstance(layout, ImageLayout):
        raise ConfigError(
            f"layout must be a jacobigen ImageLayout or VideoLayout, got {type(layout).__name__} "
            "(a pipeline carries its own: bundle.layout)"
        )


def check_layout(model: ImageModel, layout) -> None:
    """The layout against the model, before anything is sized by it: every id it places lies in the
    vocabulary, and the image fits the context."""
    check_layout_type(layout)
    lo, hi = layout.image_ids
    vocab = model.vocab_size
    if hi > vocab:
        raise ConfigError(f"layout image ids [{lo}, {hi}) exceed the model vocabulary ({vocab})")
    named = {"eol_id": layout.eol_id, "end_id": layout.end_id, "eof_id": layout.eof_id}
    named |= {f"header[{i}]": t for i, t in enumerate(layout.header)}
    for name, tok in named.items():
        if tok is not None and not 0 <= tok < vocab:
            raise ConfigError(f"layout {name}={tok} lies outside the model vocabulary [0, {vocab})")
    if len(layout.header) + layout.length + 1 > model.max_seq_len:
        raise ConfigError(
            f"the layout's {layout.length} tokens (header included: {len(layout.header)}) and a prompt do not fit "
            f"the model's context of {model.max_seq_len}"
        )


# --- behaviour --------------------------------------------------------------------------------------

SENTINEL = 1e4  # finite: a hidden slot gets weight exactly 0, and 0 * SENTINEL stays 0


def conformance(model: ImageModel, prompt: list[int], image: list[int], atol: float = 1e-4) -> None:
    """Check the cache rule on real forwards; raises AssertionError naming the broken rule.

    ``prompt`` then ``image`` (at least 4 image ids) is a sequence the model could see. Two rows get
    ragged blocks, as the decoders send them: a prefill of the prompt plus 2 or 0 image ids
    (right-padded with id 0, as the engine pads), then one block each after its own committed
    length. Every logit must equal the uncached forward over the same tokens; the model must leave
    ``cache.lengths`` alone and write exactly the slots ``lengths + arange(T)``.
    """
    check_model(model)
    p, n = len(prompt), len(prompt) + len(image)
    assert len(image) >= 4, "conformance needs at least 4 image ids"
    device = model_device(model)
    seq = torch.tensor(prompt + image, device=device)
    with torch.inference_mode():
        reference = model(seq[None])
        assert reference.dtype == torch.float32 and reference.shape == (1, n, model.vocab_size), (
            f"logits must be float32 [R, T, {model.vocab_size}], got {reference.dtype} {tuple(reference.shape)}"
        )
        cache = model.new_cache(2, n + 2)
        assert isinstance(cache, KVCache) and cache.lengths.tolist() == [0, 0], "new_cache must start empty"
        for buf in (*cache.keys, *cache.values):
            buf.fill_(SENTINEL)
        cut = torch.tensor([p + 2, p], device=device)
        padded = torch.cat([seq[:p], seq.new_zeros(2)])
        positions = torch.arange(p + 2, device=device).expand(2, -1)
        _forward_checked(
            model,
            cache,
            torch.stack([seq[: p + 2], padded]),
            positions,
            prefix_structure(cut, p + 2),
            reference,
            cut,
            atol,
            p,
        )
        cache.commit(None, cut)
        t = n - p - 2
        block = torch.stack([seq[p + 2 :], seq[p : n - 2]])
        positions = cut[:, None] + torch.arange(t, device=device)
        _forward_checked(model, cache, block, positions, causal(t, device), reference, torch.full_like(cut, t), atol, p)


def _forward_checked(model, cache, block, positions, structure, reference, valid, atol: float, prompt: int) -> None:
    """One cached forward, checked against ``reference`` on each row's first ``valid[r]`` tokens;
    both rows' prompts are ``prompt`` tokens long."""
    lengths = cache.lengths.clone()
    t = block.shape[1]
    logits = model(
        block,
        positions,
        block_mask(cache.lengths, cache.capacity, structure),
        cache,
        **prompt_lengths(model, torch.full_like(lengths, prompt)),
    )
    assert torch.equal(cache.lengths, lengths), (
        f"the model changed cache.lengths {lengths.tolist()} -> {cache.lengths.tolist()}: only the decoder commits"
    )
    keys = cache.keys[0][:, 0, :, 0]
    written = keys != torch.tensor(SENTINEL, dtype=keys.dtype)
    slots = torch.arange(cache.capacity, device=lengths.device)[None]
    in_block = (slots >= lengths[:, None]) & (slots < lengths[:, None] + t)
    assert not (written & (slots >= lengths[:, None] + t)).any(), (
        "the model wrote cache slots past lengths + arange(T) (write through cache.update only)"
    )
    assert written[in_block].all(), "the model did not write its block through cache.update"
    for r in range(block.shape[0]):
        v, start = int(valid[r]), int(positions[r, 0])
        got, want = logits[r, :v], reference[0, start : start + v]
        assert torch.allclose(got, want, atol=atol, rtol=atol), (
            f"row {r}: cached logits differ from the uncached forward by {(got - want).abs().max():.3g}"
        )
