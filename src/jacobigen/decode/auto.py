"""The lossless method and window that decode fastest on this machine: ``--method auto``, the
default of the CLI and of :func:`jacobigen.generate`, chosen so that a user who sets nothing is never
handed a method slower than plain ``ar``. It sits in the decode layer, beside ``generate``, so that the
API, the command line and the server resolve the default by one function (:func:`resolve`) on the
real prompt; a layer above hands it model rows, never a bundle.

Jacobi decoding trades compute for forward passes. On a GPU a 64-token block costs about one
single-token forward, so long windows win; on two CPU cores a 32-token block costs several. The
choice splits what depends on the model from what depends on the machine:

- **forward passes per image** (NFE) of each (method, window) depend on the model and the
  sampling only: they come from this model's own decodes here (:mod:`.learned`), else a step table
  measured on real images and shipped beside the weights (:mod:`.steps`; ``jacobigen bench
  --steps`` writes one for any checkpoint), else a prior (:mod:`.prior`);
- **what a forward costs here** is measured in a few forwards: one forward per candidate block
  size with the sampling's rows (2 for a guided sequence) after the image's real context (the
  prompt plus half the image, rounded up to 64 tokens) in a cache of the slots the decode will
  allocate (attention reads them all, so a forward of 8 tokens costs up to 15% more in the decode's
  cache than in one just long enough), and the bookkeeping per iteration (wall time outside the
  forward) from a few iterations of each candidate on the real prompt.

The predicted seconds per image of a candidate are ``NFE x (cost(block) + bookkeeping)``. ``ar``
runs unless a candidate is predicted at least ``MARGIN`` (1.1) times as fast: a smaller gain is
within what the measurement's noise can make up. A measurement beats a prediction: after a run
the measured seconds per image are kept (:func:`remember`), used instead of the prediction next
time, and a candidate measured slower than ``ar`` is dropped. A candidate known only by its prior
never displaces ``ar`` by the margin: ``auto`` explores it when :mod:`.prior` says its worst case is
safe and its expected gain large; a named method runs its window predicted fastest, priors included.
Only lossless methods are candidates: the choice changes the speed, never the distribution.
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch

from ..core.cache import cache_slots
from ..core.checks import SAMPLING_KEYS
from ..core.contract import model_device
from ..core.errors import ConfigError
from ..core.layout import ImageLayout
from ..core.sampling import SamplingConfig
from ..parts.tree import MAX_NODES
from . import calibration, learned, prior
from .batching import decode
from .calibration import cache_file
from .costs import block_size, forward_cost_curve, interpolate
from .jacobi import JacobiDecoder
from .methods import get_method, parse_variant
from .steps import find_steps, label, sampling_key

METHODS = ("scd-gs", "scd-mc", "sjd-pac")  # the lossless presets auto weighs beside ar
WINDOWS = (8, 16, 32, 64)
MARGIN = 1.1  # a candidate must be predicted this much faster than ar to run instead
CONTEXT_STEP = 64  # the context the forward is timed at: rounded up to this (one record per bucket)
PROBE_WARMUP, PROBE_ITERATIONS = 2, 5  # iterations of each candidate: untimed, then timed
COST_REPS = 4  # timed forwards per block size (after one untimed round)


def unbuildable(variant, window: int) -> str | None:
    """Why the variant's parts do not build at this window (None: they do)."""
    try:
        variant.build(window)
    except ConfigError as e:
        return str(e)
    return None


def check_window(window) -> int | None:
    """``window`` as auto takes it: None (weigh ``WINDOWS``) or a whole number >= 1."""
    if window is None:
        return None
    if isinstance(window, bool) or not isinstance(window, int):
        raise ConfigError(f"window must be a whole number >= 1, or None to let auto weigh {WINDOWS}; got {window!r}")
    if window < 1:
        raise ConfigError(f"window must be >= 1 (None lets auto weigh {WINDOWS}); got {window}")
    return window


def candidates(method: str = "auto", window: int | None = None) -> list[tuple[str, int]]:
    """(method, window) pairs to weigh: ``method`` "auto" weighs ``METHODS`` and ``ar``, a method
    of its own weighs only itself; ``window`` None weighs ``WINDOWS``, a number only that window.
    A method with a window of its own (``ar``) and another window is refused."""
    if method != "auto":
        get_method(method)  # not a string, or no method: its own message
    window = check_window(window)
    names = ["ar", *METHODS] if method == "auto" else [method]
    out = []
    for name in names:
        variant = parse_variant(name)
        if variant.window is not None:  # ar: window 1 always
            if window not in (None, variant.window) and method != "auto":
                raise ConfigError(f"{variant.label} always runs window {variant.window}: window {window} cannot apply")
            out.append((variant.label, variant.window))
            continue
        out += [(variant.label, w) for w in ([window] if window else WINDOWS) if unbuildable(variant, w) is None]
    if not out:
        raise ConfigError(f"method {method!r} builds at none of the windows {window or WINDOWS}")
    return out


@dataclass(frozen=True)
class Choice:
    """The chosen (method, window), its seconds per image and ``ar``'s (measured where a run was
    remembered, else predicted), every candidate's, and where they came from."""

    method: str
    window: int
    seconds: float
    ar_seconds: float
    # "method@window" -> predicted seconds per image: inf when not in the step table (never chosen); for a
    # candidate whose forwards alone cost more than the best, that cost (a lower bound: it was not probed)
    predicted: dict
    calibrated: bool  # whether this call measured anything (False: all from the cache)
    table: Path | None = None  # the step table (None: none for this model and sampling)
    reason: str = ""
    measured: dict = field(default_factory=dict)  # "method@window" -> remembered seconds per image
    key: str = ""  # the cache record this choice used
    sampling: str = ""  # its sampling key
    steps: dict = field(default_factory=dict)  # "method@window" -> its Steps' fields: forwards and their source
    learned: str = ""  # the model key of its learned figures (:func:`.learned.model_key`)

    @property
    def speedup(self) -> float:
        """Speedup over ``ar`` on this machine (:attr:`basis` says whether measured); 1 for ``ar``."""
        if self.method == "ar" or not math.isfinite(self.seconds) or self.seconds <= 0:
            return 1.0
        return self.ar_seconds / self.seconds

    @property
    def ar_measured(self) -> bool:
        """Whether ``ar_seconds`` comes from a run here (else it is predicted, or NaN without a table)."""
        return "ar@1" in self.measured

    @property
    def basis(self) -> str:
        """ "measured" when both the chosen pair's seconds and ``ar``'s come from runs here, else
        "predicted": a ratio is called measured only when both its terms were."""
        return "measured" if self.ar_measured and label(self.method, self.window) in self.measured else "predicted"


def machine_key(model, rows: int, context: int, sampling: dict) -> str:
    """What a calibration holds for: the weights (:func:`~jacobigen.tools.steps.fingerprint`), the
    device, dtype, torch threads and version, the forward's rows and context bucket, and the part
    of the sampling the bookkeeping depends on (top-k and top-p; temperature and the guidance scale
    change no cost)."""
    from .steps import fingerprint

    device = model_device(model)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    top_k, top_p = sampling.get("top_k"), sampling.get("top_p")
    return " | ".join(
        [
            fingerprint(model),
            name,
            str(next(model.parameters()).dtype),
            f"threads={torch.get_num_threads()}",
            f"torch={torch.__version__}",
            f"rows={rows}",
            f"context={context}",
            f"top_k={top_k}",
            f"top_p={'none' if top_p in (None, 1, 1.0) else format(float(top_p), '.2g')}",
        ]
    )


def context_for(model, layout: ImageLayout, rows: list[list[int]]) -> int:
    """The context a forward is timed after: the prompt, the header and half the image (the mean over
    the image), rounded up to ``CONTEXT_STEP`` tokens, within what the model takes."""
    context = -(-(len(rows[0]) + len(layout.header) + layout.length // 2) // CONTEXT_STEP) * CONTEXT_STEP
    return max(1, min(context, model.max_seq_len - max(WINDOWS) - 32))


def record_key(model, layout: ImageLayout, rows: list[list[int]], sampling: dict) -> str:
    """The cache record a choice for these model ``rows`` and ``sampling`` reads and writes."""
    guided = sampling.get("cfg", 1.0) not in (None, 1, 1.0)
    return machine_key(model, 2 if guided else 1, context_for(model, layout, rows), sampling)


class _Enough(Exception):
    """Raised from the progress hook: the probe has the iterations it needs."""


def _probe(model, layout, sampling: SamplingConfig, rows: list[list[int]], method: str, window: int, latents) -> float:
    """Seconds per iteration outside the forward, over ``PROBE_ITERATIONS`` iterations of one
    sequence after ``PROBE_WARMUP`` untimed ones (fewer when the image ends sooner)."""
    decoder = JacobiDecoder(model, layout, sampling, get_method(method).build(window), timing=True, latents=latents)
    engine = decoder.engine
    marks: list[tuple[float, float, int]] = []

    def watch(_tokens: int) -> None:
        marks.append((time.perf_counter(), engine.forward_time, engine.nfe))
        if len(marks) > 1 + PROBE_WARMUP + PROBE_ITERATIONS:  # the first mark is the admission
            raise _Enough

    try:
        decode(engine, rows, [0], None, watch)
    except _Enough:
        pass
    timed = marks[min(1 + PROBE_WARMUP, len(marks) - 2) :] if len(marks) >= 3 else marks
    per_iteration = [
        ((t1 - t0) - (f1 - f0)) / max(n1 - n0, 1) for (t0, f0, n0), (t1, f1, n1) in itertools.pairwise(timed)
    ]
    return max(0.0, statistics.median(per_iteration)) if per_iteration else 0.0  # the median: robust to a burst


def _pick(method: str, seconds: dict[str, float], ar: float, pairs, measured: set[str]) -> tuple[str, int]:
    """The pair with the fewest seconds, but a pair already measured here (the fastest such, ar
    when none) stays unless another is ``MARGIN`` times as fast, and for ``auto`` only a pair
    ``MARGIN`` times as fast as ar replaces ar: smaller gains are within the noise."""
    others = [p for p in pairs if p != ("ar", 1)]
    if method == "auto" and not others:
        return ("ar", 1)
    pool = others if method == "auto" else (others or pairs)
    best = min(pool, key=lambda mw: seconds[label(*mw)])
    kept = [p for p in pool if label(*p) in measured and math.isfinite(seconds[label(*p)])]
    if kept:
        incumbent = min(kept, key=lambda mw: seconds[label(*mw)])
        if seconds[label(*incumbent)] < MARGIN * seconds[label(*best)]:
            best = incumbent
    if method == "auto" and not ar / seconds[label(*best)] >= MARGIN:
        return ("ar", 1)
    return best


SOURCES = ("measured", "table", "prior", "exact")  # where a candidate's forwards per image come from, best first


@dataclass(frozen=True)
class Steps:
    """Forwards per image of one candidate, and where the figure comes from: ``measured`` (learned from
    this model's decodes here, over ``images`` images with ``spread``, :mod:`.learned`), ``table`` (a
    step table), ``prior`` (``note`` says which figure, :mod:`.prior`), ``exact`` (``ar``: one per token)."""

    nfe: float
    source: str
    images: int = 0
    spread: float = 0.0
    note: str = ""


def forwards(model, layout: ImageLayout, sampling: dict, pairs) -> tuple[dict[str, Steps], Path | None]:
    """Each pair's forwards per image, the measured figure first, then a step table's, then the prior;
    and the step table's path (None: none for this model and sampling)."""
    found = find_steps(model, layout.length, sampling)
    table, path = found if found else ({}, None)
    own = learned.figures(model, layout.length, sampling)
    out = {"ar@1": Steps(float(layout.length), "exact")}
    for mw in pairs:
        name = label(*mw)
        if name == "ar@1":
            continue
        if name in own:
            f = own[name]
            out[name] = Steps(f.nfe, "measured", f.images, f.spread)
        elif name in table:
            out[name] = Steps(table[name], "table", note=path.name if path else "")
        else:
            compression, note = prior.expected_compression(layout.length, mw[1])
            out[name] = Steps(layout.length / compression, "prior", note=note)
    return out, path


def choose_for(
    model,
    layout: ImageLayout,
    rows: list[list[int]],
    sampling: dict,
    method: str = "auto",
    window: int | None = None,
    cache: Path | None = None,
    latents=None,
) -> Choice:
    """The choice for one prompt's model ``rows`` (its cond/uncond pair when guided) under
    ``sampling`` (cfg, temperature, top_k, top_p); what ``cache`` (None: keep nothing) lacks is
    measured and added to it. ``auto`` weighs the pairs with a measured or tabled figure by
    ``MARGIN``, then explores a pair known only by its prior when :mod:`.prior` says it is worth it;
    a named method runs its window predicted fastest, priors included."""
    pairs = _checked(method, window, layout, sampling)
    steps, table = forwards(model, layout, sampling, pairs)
    key, skey = record_key(model, layout, rows, sampling), sampling_key(sampling)
    records, dirty = calibration.load(cache)
    record = records.get(key, {"used": time.time(), "curve": {}, "bookkeeping": {}, "measured": {}})
    costs = _Costs(model, layout, rows, sampling, latents, record)
    remembered = {  # runs of the pairs weighed here (a named method's other runs are another question)
        name: v for k, v in record["measured"].items() if k.endswith(f"|{skey}") and (name := k.split("|")[0]) in steps
    }
    predicted, verdicts = costs.predict(pairs, steps, remembered.get("ar@1"), method)
    seconds = {**predicted, **remembered}  # a measurement beats a prediction
    ar_seconds = seconds["ar@1"]
    for name, s in remembered.items():  # measured slower than ar: dropped, whatever was predicted
        if name != "ar@1" and s >= ar_seconds:
            seconds[name] = math.inf
    explored = None
    if method == "auto":  # a prior alone never displaces ar by the margin: it can only be explored
        known = {k: v if steps[k].source != "prior" or k in remembered else math.inf for k, v in seconds.items()}
        best = _pick(method, known, ar_seconds, pairs, set(remembered))
        explored = _explore(verdicts, seconds, known[label(*best)], set(remembered))
        best = explored or best
    else:
        best = _pick(method, seconds, ar_seconds, pairs, set(remembered))
    if cache is not None and (costs.measured or dirty):
        calibration.save(cache, key, costs.record())
    return Choice(
        *best,
        seconds[label(*best)],
        ar_seconds,
        predicted,
        costs.measured,
        table,
        _reason(best, steps, seconds, ar_seconds, method, remembered, verdicts, explored is not None),
        remembered,
        key,
        skey,
        {k: vars(v) for k, v in steps.items()},
        learned.model_key(model, layout.length, sampling),
    )


def _explore(verdicts: dict, seconds: dict, incumbent: float, measured: set[str]) -> tuple[str, int] | None:
    """The pair known only by its prior that :mod:`.prior` says to try, with the largest expected gain,
    when it is also predicted ``MARGIN`` times as fast as the incumbent (None: none)."""
    worth = [n for n, v in verdicts.items() if v.explore and n not in measured and seconds[n] * MARGIN <= incumbent]
    if not worth:
        return None
    name = max(worth, key=lambda n: verdicts[n].gain)
    method, w = name.rsplit("@", 1)
    return method, int(w)


def _checked(method, window, layout: ImageLayout, sampling: dict) -> list[tuple[str, int]]:
    """:func:`candidates`, with the window and the sampling checked as :func:`jacobigen.generate` would."""
    pairs = candidates(method, window)
    if window is not None and window > layout.length + MAX_NODES:
        raise ConfigError(
            f"window {window} is longer than a block can use: the image has {layout.length} tokens "
            f"and a tree at most {MAX_NODES} nodes (window <= {layout.length + MAX_NODES})"
        )
    unknown = set(sampling) - set(SAMPLING_KEYS)
    if unknown:
        raise ConfigError(
            f"unknown sampling option(s) {', '.join(sorted(unknown))}: auto takes {', '.join(SAMPLING_KEYS)}"
        )
    SamplingConfig(**{k: v for k, v in sampling.items() if v is not None})  # each value checked
    return pairs


class _Costs:
    """This machine's costs for one cache record: forwards by block size and bookkeeping by
    candidate, each measured the first time it is asked for (``measured`` says whether any was)."""

    def __init__(self, model, layout, rows, sampling: dict, latents, record: dict):
        self.model, self.layout, self.rows, self.latents = model, layout, rows, latents
        self.config = SamplingConfig(**{k: v for k, v in sampling.items() if v is not None})
        self.context = context_for(model, layout, rows)
        self.prefix = len(rows[0]) + len(layout.header)
        self.curve = {int(k): v for k, v in record["curve"].items()}
        self.bookkeeping = dict(record["bookkeeping"])
        self.remembered = dict(record["measured"])
        self.measured = False

    def forward(self, *sizes: int) -> float:
        """Seconds of one forward of the first size (the others measured along, in one go)."""
        missing = sorted(set(sizes) - set(self.curve))
        if missing:
            rows = 2 if self.config.guided else 1
            slots = partial(cache_slots, self.prefix, self.layout.length)  # the decode's cache, per block size
            self.curve.update(forward_cost_curve(self.model, missing, self.context, COST_REPS, rows, slots))
            self.measured = True
        return interpolate(self.curve, sizes[0])

    def overhead(self, method: str, window: int) -> float:
        name = label(method, window)
        if name not in self.bookkeeping:
            self.bookkeeping[name] = _probe(
                self.model, self.layout, self.config, self.rows, method, window, self.latents
            )
            self.measured = True
        return self.bookkeeping[name]

    def predict(self, pairs, steps: dict, ar_measured: float | None, method: str) -> tuple[dict, dict]:
        """Seconds per image of each pair, ``NFE x (cost(block) + bookkeeping)``, and the prior's
        :class:`~.prior.Verdict` of each pair known only by its prior. ``NFE x cost(block)`` (a lower
        bound) for a pair that cannot win even without bookkeeping, or (``auto``) a prior's pair whose
        forward alone breaks the worst-case bound: neither is probed."""
        blocks = {mw: block_size(get_method(mw[0]).build(mw[1]), self.layout) for mw in pairs}
        blocks.pop(("ar", 1), None)
        ar_overhead = self.overhead("ar", 1)  # first: its iterations also warm the model up for the timing
        self.forward(1, *blocks.values())
        ar_forward = self.forward(1) + ar_overhead
        predicted = {label(*mw): math.inf for mw in [*pairs, ("ar", 1)]}
        predicted["ar@1"] = self.layout.length * ar_forward
        threshold = (ar_measured or predicted["ar@1"]) / MARGIN if method == "auto" else math.inf
        verdicts = {}
        for mw in sorted(blocks, key=lambda mw: steps[label(*mw)].nfe * self.forward(blocks[mw])):
            name, cost = label(*mw), self.forward(blocks[mw])
            guess = steps[name].source == "prior"
            floor = steps[name].nfe * cost
            out = guess and method == "auto" and cost / ar_forward > prior.WORST_CASE
            if (out or floor >= threshold) and name not in self.bookkeeping:
                predicted[name] = floor
                if guess:
                    verdicts[name] = prior.weigh(cost, ar_forward, self.layout.length / steps[name].nfe, probed=False)
                continue
            per_iteration = cost + self.overhead(*mw)
            predicted[name] = steps[name].nfe * per_iteration
            if guess:
                verdicts[name] = prior.weigh(per_iteration, ar_forward, self.layout.length / steps[name].nfe)
            else:
                threshold = min(threshold, predicted[name])
        return predicted, verdicts

    def record(self) -> dict:
        return {
            "used": time.time(),
            "curve": {str(k): v for k, v in self.curve.items()},
            "bookkeeping": self.bookkeeping,
            "measured": self.remembered,
        }


def _reason(best, steps, seconds, ar_seconds, method, measured, verdicts, explored) -> str:
    name = label(*best)
    if explored:
        v, f = verdicts[name], steps[name]
        compression = steps["ar@1"].nfe / f.nfe
        return (
            f"exploring {name}: no figure for this model yet; expected {v.gain:.2f}x ar's speed from "
            f"{compression:.2f}x fewer forwards ({f.note}) against a break-even {v.break_even:.2f}x; worst case "
            f"(one token per iteration) {v.worst:.2f}x ar's time, within {prior.WORST_CASE}x"
        )
    if best == ("ar", 1):
        known = [v for k, v in seconds.items() if k != "ar@1" and steps[k].source != "prior"]
        top = min(known, default=math.inf)
        if not known and method == "auto":
            safest = min(verdicts.items(), key=lambda kv: kv[1].worst, default=None)
            if safest is None:
                return "no figure for this model and sampling, and no candidate to explore"
            v = safest[1]
            return (
                f"no figure for this model and sampling; no candidate is worth exploring: the safest, {safest[0]}, "
                f"costs {'' if v.probed else 'at least '}{v.worst:.2f}x ar's time at one token per iteration and is "
                f"expected at {v.gain:.2f}x ar's speed (explored within {prior.WORST_CASE}x and an expected "
                f"{prior.EXPLORE_GAIN}x gain)"
            )
        gain = ar_seconds / top if math.isfinite(top) and top > 0 else 0.0
        return f"no candidate beats ar by {MARGIN}x (best {gain:.2f}x)"
    how = "measured" if name in measured else "predicted"
    f = steps[name]
    source = {
        "measured": f"{f.nfe:.1f} forwards per image measured here over {f.images} image(s), spread {f.spread:.1f}",
        "table": f"{f.nfe:.1f} forwards per image from {f.note}",
        "prior": f"{f.nfe:.1f} forwards per image by the prior ({f.note})",
    }.get(f.source, "")
    ar_how = "measured" if "ar@1" in measured else "predicted"
    return f"{how} {seconds[name]:.2f} s per image against ar's {ar_how} {ar_seconds:.2f} s; {source}"


def remember(choice: Choice, seconds_per_image: float, cache: Path | None) -> None:
    """Keep the measured seconds per image of a run of ``choice`` (one image alone, no other work):
    the next choice uses it instead of the prediction, and drops a method measured slower than ar."""
    if cache is None or not choice.key or not calibration.SECONDS[0] <= seconds_per_image <= calibration.SECONDS[1]:
        return
    records, _ = calibration.load(cache)
    record = records.get(choice.key)
    if record is None:
        return
    name = f"{label(choice.method, choice.window)}|{choice.sampling}"
    record["measured"][name] = min(seconds_per_image, record["measured"].get(name, math.inf))  # the fastest run
    calibration.save(cache, choice.key, record)


def resolve(
    model, layout: ImageLayout, rows: list[list[int]], sampling: dict, method="auto", window=None, latents=None
) -> Choice | None:
    """The one resolution of the default (the API's ``method="auto"`` or ``window=None``, the command
    line's, a resumed job's first run): :func:`choose_for` the first sequence's model ``rows`` (the real
    prompt) with the calibration cache; None when there is nothing to choose (a method with a window of
    its own, ``ar``)."""
    if isinstance(method, str) and method != "auto" and window is None and get_method(method).window:
        return None
    return choose_for(model, layout, rows, sampling, method, window, cache_file(), latents)
