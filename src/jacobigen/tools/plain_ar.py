"""The baseline a user would write in ten minutes: a plain-torch KV-cache AR sampler.

It calls the documented model interface (``model(tokens, positions, mask, cache)``, plus the prompt
lengths of a model that needs them) and nothing else of jacobigen's decoding code: prefill the
prompt (and the unconditional prompt for CFG, left-padded to the same length), then one token per
forward, each through CFG -> allowed ids -> temperature -> top-k -> top-p -> multinomial, forced
end-of-line/end-of-image tokens written without sampling (the model is still run on them, as an AR
loop must). That is ``layout.length`` forwards: the prefill gives the first token, one more forward
each further token. It shares no code with the engine on purpose. ``jacobigen bench`` times it
beside ``ar`` and reports every latency speedup against the faster of the two; ``jacobigen
throughput`` times its batched form (every prompt's rows in one forward) at each batch size.

Its tokens are not ours (it uses torch's generator, not our counter-based draws): it is a timing
reference, and its distribution is the AR distribution by construction. With ``top_k=1`` there is
nothing to draw, and its tokens equal ``ar``'s (tests/tools/test_plain_ar.py).
"""

from __future__ import annotations

import torch

from ..core.contract import model_device, prompt_lengths


def plain_ar(model, layout, prompt: list[int], uncond: list[int] | None = None, **sampling) -> torch.Tensor:
    """Sample one image's generated tokens [layout.length] for one prompt."""
    return plain_ar_batch(model, layout, [prompt], None if uncond is None else [uncond], **sampling)[0]


@torch.inference_mode()
def plain_ar_batch(
    model,
    layout,
    prompts: list[list[int]],
    unconds: list[list[int]] | None = None,
    cfg: float = 1.0,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
) -> torch.Tensor:
    """Sample the generated tokens [len(prompts), layout.length] of a batch, one forward per token
    for all rows together (each prompt's conditional row, then its unconditional one under CFG)."""
    device = model_device(model)
    gen = torch.Generator(device=device).manual_seed(seed)
    guided = cfg != 1.0
    rows = []
    for j, prompt in enumerate(prompts):
        rows.append(list(prompt) + list(layout.header))
        if guided:
            rows.append(list(unconds[j]) + list(layout.header))
    width = max(len(r) for r in rows)
    cache = model.new_cache(len(rows), width + layout.length)
    # prefill, left-padded so that every row's last prompt token sits at the same slot
    tokens = torch.zeros(len(rows), width, dtype=torch.int64, device=device)
    pad = torch.zeros(len(rows), width, dtype=torch.bool, device=device)
    for r, row in enumerate(rows):
        tokens[r, width - len(row) :] = torch.tensor(row, device=device)
        pad[r, : width - len(row)] = True
    positions = (torch.arange(width, device=device) - pad.sum(1, keepdim=True)).clamp(min=0)
    causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
    visible = causal[None] & ~pad[:, None, :] | torch.eye(width, dtype=torch.bool, device=device)
    mask = torch.full((len(rows), 1, width, cache.capacity), float("-inf"), device=device)
    mask[:, 0, :, :width] = torch.where(visible, 0.0, float("-inf"))
    lengths = prompt_lengths(model, torch.tensor([len(r) for r in rows], device=device))
    logits = model(tokens, positions, mask, cache, **lengths)[:, -1]
    cache.lengths += width

    lo, hi = layout.image_ids
    forced = layout.forced(device).tolist()
    step_mask = torch.full((len(rows), 1, 1, cache.capacity), float("-inf"), device=device)
    step_mask[:, 0, 0, :width] = torch.where(pad, float("-inf"), 0.0)
    pos = positions[:, -1:] + 1
    n = len(prompts)
    out = torch.empty(n, layout.length, dtype=torch.int64, device=device)
    for i in range(layout.length):
        if forced[i] >= 0:
            tok = torch.full((n,), forced[i], device=device)
        else:
            x = logits[:, lo:hi].float()
            if guided:
                x = x[1::2] + cfg * (x[0::2] - x[1::2])
            x = x / temperature
            ids = torch.arange(x.shape[-1], device=device).expand_as(x)
            if top_k is not None and top_k < x.shape[-1]:
                x, ids = x.topk(top_k, dim=-1)
            probs = x.softmax(-1)
            if top_p is not None and top_p < 1:  # keep the most likely ids until their mass reaches top_p
                ranked, order = probs.sort(-1, descending=True)
                probs = torch.zeros_like(probs).scatter(-1, order, ranked * (ranked.cumsum(-1) - ranked < top_p))
            tok = lo + ids.gather(-1, torch.multinomial(probs, 1, generator=gen))[:, 0]
        out[:, i] = tok
        if i + 1 == layout.length:
            break
        step_mask[..., width + i] = 0.0  # the new token sees itself: open its slot first
        step = tok.repeat_interleave(2) if guided else tok
        logits = model(step[:, None], pos, step_mask, cache, **lengths)[:, -1]
        cache.lengths += 1
        pos = pos + 1
    return out
