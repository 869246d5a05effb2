"""Options several commands share, each parsed into one frozen dataclass in one place.

``model_options`` gives a command a :class:`ModelChoice` (``--model``, ``--device``,
``--threads``, ``--trust-checkpoint``, ``--quantize``, ``--dtype``); ``decoding_options`` adds a
:class:`Decoding` (method, window, seeds, sampling, ``-o`` options, ``--stats``, progress). Both are
checked before torch is imported: a bad value is one line naming the option (exit 2).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from pathlib import Path

import click
from click.core import ParameterSource

from ..core.checks import MAX_SEED, SAMPLING_KEYS, image_seeds
from ..core.errors import ConfigError
from ..models import embedded as E
from ..tools.dtypes import DTYPE_OPTION
from ..tools.threads import check_threads
from .params import Finite, Window, options_of

DEFAULTS, NAMES_DEFAULTS, VIDEO_DEFAULTS, NAMES_VIDEO_DEFAULTS = (
    ", ".join(f"{k.replace('_', '-')} {v}" for k, v in sampling.items())
    for sampling in (E.SAMPLING, E.NAMES_SAMPLING, E.VIDEO_SAMPLING, E.NAMES_VIDEO_SAMPLING)
)
SAMPLING_OPTIONS = [
    click.option(
        "--cfg",
        type=Finite(),
        default=None,
        help=f"Classifier-free guidance scale (1: none). Default: the model's own (the default, emoji-names, "
        f"samples with {NAMES_DEFAULTS}; emoji with {DEFAULTS}; emoji-names-video with "
        f"{NAMES_VIDEO_DEFAULTS}; emoji-video with {VIDEO_DEFAULTS}; "
        "random with cfg 1, temperature 1, all ids).",
    ),
    click.option(
        "--temperature",
        type=Finite(0, lo_open=True),
        default=None,
        help="Softmax temperature, > 0 (smaller: sharper). Default: the model's own (0.5 for the default model).",
    ),
    click.option(
        "--top-k",
        type=click.IntRange(min=1),
        default=None,
        help="Sample among the K most likely image ids. Default: the model's own (50 for the "
        "default, emoji-names, and for emoji-names-video; 200 for emoji; all for emoji-video and random).",
    ),
    click.option(
        "--top-p",
        type=Finite(0, 1, lo_open=True),
        default=None,
        help="Sample among the most likely ids holding this much probability, in (0, 1] (1: all). Default: the "
        "model's own (0.9 for emoji-video, as Cosmos-1-AR 12B; else 1).",
    ),
]


def sampling_of(kw) -> dict:
    """The sampling options the user set (popped from ``kw``): the model's own stand for the rest."""
    return {k: v for k in SAMPLING_KEYS if (v := kw.pop(k)) is not None}


@dataclass(frozen=True)
class ModelChoice:
    """Which model, where, on how many threads, and whether pickled checkpoints may load."""

    spec: str
    device: str | None = None
    threads: int | None = None
    trust_checkpoint: bool = False
    quantize: str | None = None  # --quantize: int8 or int4 weights (torchao), None: the model's dtype
    dtype: str | None = None  # --dtype: float32, bfloat16 or float16, None: the model's default

    def load(self):
        """The model bundle, with torch's threads chosen for it (a note about the model printed)."""
        from ..models.load import load_bundle
        from ..tools.threads import choose_threads

        bundle = load_bundle(self.spec, self.device, self.trust_checkpoint, self.quantize, self.dtype)
        choose_threads(bundle.model, self.threads)
        if bundle.note:
            click.echo(f"model: {bundle.name} ({bundle.note})")
        return bundle

    def plan(self, decoding: Decoding, sequences: int, sampling: dict | None = None, present: bool = True):
        """The memory plan of decoding ``sequences`` with this model (:mod:`jacobigen.models.memory`),
        made before any weight loads; None when the model's shape is known only once loaded.
        ``present``: the device must be on this machine (a dry run plans for one that is not)."""
        from ..core.quantize import check_mode
        from ..models import memory, shapes
        from ..models.load import check_dtype, check_spec, default_dtype, parse_device, resolve_device

        device = resolve_device(self.device) if present or self.device is None else parse_device(self.device)
        check_mode(self.quantize, device)  # int4 off CUDA, or no torchao: said before the plan
        dtype = check_dtype(self.dtype, self.quantize) or default_dtype(self.spec, str(device))
        shape = shapes.shape_of(check_spec(self.spec))
        if shape is None:
            return None
        cfg = {**decoding.sampling, **(sampling or {})}.get("cfg")
        window = decoding.window
        if window is None:  # auto: plan for the widest window it may choose (a method's own if it has one: ar's 1)
            from ..decode.auto import WINDOWS
            from ..decode.methods import get_method

            fixed = None if decoding.method == "auto" else get_method(decoding.method).window
            window = fixed or max(WINDOWS)
        return memory.fitting(
            shape,
            decoding.batch_size,
            sequences,
            device=device,
            dtype=dtype,
            quantize=self.quantize,
            window=window,
            cfg=None if cfg is None else cfg != 1,
        )

    def check_memory(self, decoding: Decoding, sequences: int, dry_run: bool = False) -> None:
        """Print the plan (``dry_run``), or refuse a decode that does not fit before its weights load."""
        plan = self.plan(decoding, sequences, present=not dry_run)
        if dry_run:
            click.echo(plan.text() if plan else f"memory plan: the shape of {self.spec} is known only once it loads")
        elif plan is not None and not plan.fits:
            raise ConfigError(plan.refusal())


@dataclass(frozen=True)
class Decoding:
    """How to decode: the method and its options, the seeds, the sampling, what to report."""

    method: str  # a method string, or "auto"
    window: int | None  # None: auto
    seed: int = 0
    batch_size: int | None = None
    sampling: dict = field(default_factory=dict)  # only what the user set: the model's own otherwise
    options: dict = field(default_factory=dict)  # -o key=value, for the method's parts
    stats_path: Path | None = None
    progress: bool = True
    window_given: bool = False  # --window on the command line, not its default
    # --deterministic: tokens bit-identical in any batch and block (row-invariant kernels); None: as same_as_ar
    deterministic: bool | None = None
    cuda_graphs: bool = True  # --no-cuda-graphs: forwards run eagerly on CUDA too
    same_as_ar: bool = False  # --same-as-ar: the invariant verifier, ar's own tokens for the seed

    @property
    def determinism(self) -> bool:
        """Whether the decode runs deterministic: as asked, else with --same-as-ar (whose promise needs it)."""
        return self.same_as_ar if self.deterministic is None else self.deterministic

    def seeds(self, n: int) -> list[int]:
        """The seeds of ``n`` images (image i gets seed + i), checked before any work."""
        try:
            return image_seeds(self.seed, n)
        except ConfigError as e:
            raise click.BadParameter(str(e), param_hint="--seed") from e

    def check_method(self) -> None:
        """The method and its options, built once before the model loads (their parts check them)."""
        from ..decode.methods import get_method, same_as_ar

        if self.method == "auto" or self.window is None:
            from ..decode.auto import WINDOWS, candidates
            from ..decode.calibration import cache_file, check_cache

            candidates(self.method, self.window)  # refuses a method that builds at no window
            check_cache(cache_file())  # a FIFO or a device there: refused before the model loads
            if self.method == "auto":
                return self.check_options()
            if self.options:  # a named method, its window auto
                get_method(self.method).build(max(WINDOWS), **self.options)  # an unknown option: its part's error
                raise click.BadParameter(
                    f"-o {', '.join(self.options)}: --window auto calibrates {self.method} without method options; "
                    "name the window",
                    param_hint="--option",
                )
        spec = get_method(self.method)
        if self.same_as_ar:
            try:
                same_as_ar(spec)
            except ConfigError as e:
                raise click.BadParameter(str(e), param_hint="--same-as-ar") from e
        if spec.window is not None and self.window_given and self.window not in (None, spec.window):
            raise click.BadParameter(
                f"{spec.name} always runs window {spec.window}: --window {self.window} would be ignored",
                param_hint="--window",
            )
        spec.build(spec.window or self.window or 1, **self.options)

    def check_options(self) -> None:
        """-o options with ``--method auto``: only those every candidate reads (none: the candidates
        differ in their parts)."""
        if self.options:
            raise click.BadParameter(
                f"-o {', '.join(self.options)}: --method auto weighs methods with different options; name the method",
                param_hint="--option",
            )

    def resolve(self, bundle, prompt: str | None = None, kept: tuple[str, int] | None = None):
        """This decoding with ``auto`` replaced by the choice (:func:`jacobigen.decode.auto.resolve`, the
        API's own resolution, on ``prompt``'s model rows: the model's step table and this machine's
        costs, cached), and the choice (None when nothing was auto). ``kept``: the (method, window) a
        resumed job started with, kept."""
        if self.same_as_ar and self.method == "auto":
            from ..decode.api import SAME_AS_AR_AUTO

            click.echo(
                f"auto: --same-as-ar runs {SAME_AS_AR_AUTO} (its drafts share ar's noise); its window and the "
                f"prediction below come from {SAME_AS_AR_AUTO}'s figures under rejection sampling"
            )
            return replace(self, method=SAME_AS_AR_AUTO).resolve(bundle, prompt, kept)
        if self.method != "auto" and self.window is not None:
            return self, None
        from ..decode.auto import resolve
        from ..decode.calibration import cache_file
        from ..decode.methods import get_method
        from ..tools.auto import model_rows, sampling_of

        fixed = None if self.method == "auto" else get_method(self.method).window
        if fixed:  # ar: nothing to weigh
            return replace(self, window=fixed), None
        if kept is not None:
            click.echo(f"auto: {kept[0]} at window {kept[1]}, as this job started (its records say so)")
            return replace(self, method=kept[0], window=kept[1]), None

        sampling = sampling_of(bundle, self.sampling)
        model, rows = model_rows(bundle, sampling, prompt)
        choice = resolve(model, bundle.layout, rows, sampling, self.method, self.window, bundle.latents)
        assert choice is not None  # a method with a window of its own returned above
        where = f"{'measured now' if choice.calibrated else 'costs'} in {cache_file()}"
        if choice.table is None:
            click.echo(f"auto: {choice.method} at window {choice.window} ({choice.reason})")
        else:
            click.echo(
                f"auto: {choice.method} at window {choice.window}, {choice.basis} {choice.speedup:.2f}x ar's speed "
                f"here ({choice.reason}; steps from {choice.table.name}, {where})"
            )
        return replace(self, method=choice.method, window=choice.window), choice

    def generate_kwargs(self, **more) -> dict:
        """Keyword arguments of ``ModelBundle.generate`` for this decoding."""
        return dict(
            method=self.method,
            window=self.window,
            batch_size=self.batch_size,
            progress=self.progress,
            deterministic=self.determinism,
            cuda_graphs=self.cuda_graphs,
            same_as_ar=self.same_as_ar,
            **self.options,
            **self.sampling,
            **more,
        )


def _apply(options, build):
    """Decorate ``f`` with click ``options`` and hand it one object built by ``build`` from their values."""

    def decorate(f):
        @functools.wraps(f)
        def run(**kwargs):
            return f(**build(kwargs), **kwargs)

        for option in reversed(options):
            run = option(run)
        return run

    return decorate


def model_options(default: str = "default", model_help: str | None = None, threads: bool = True):
    """``--model``, ``--device`` and ``--trust-checkpoint`` (and ``--threads`` unless the command
    takes a list of them), handed to the command as ``model: ModelChoice``."""
    options = [
        click.option("--model", "model_spec", default=default, show_default=True, help=model_help),
        click.option("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda if available)."),
        click.option(
            "--trust-checkpoint",
            is_flag=True,
            help="Let pickled checkpoints that hold Python objects load (LlamaGen's training checkpoints store "
            "their argparse.Namespace). Unpickling can run code: only for files you trust.",
        ),
    ]
    options.append(
        click.option(
            "--quantize",
            type=click.Choice(["int8", "int4"]),
            default=None,
            help="Quantize the model's linear weights (torchao, weight-only; int4: group size 128, CUDA only; "
            'pip install -e ".[quant]"). The target distribution is the quantized model\'s; lossless methods '
            "sample it exactly.",
        )
    )
    options.append(DTYPE_OPTION)
    if threads:
        options.append(
            click.option(
                "--threads",
                type=click.IntRange(min=1),
                default=None,
                callback=check_threads,
                help="Torch CPU threads (default: 1 for a model under 50M parameters on the CPU, where a second "
                "OpenMP thread stalls whenever the other core is busy; else torch's default).",
            )
        )

    def build(kw):
        return {
            "model": ModelChoice(
                kw.pop("model_spec"),
                kw.pop("device"),
                kw.pop("threads", None),
                kw.pop("trust_checkpoint"),
                kw.pop("quantize"),
                kw.pop("dtype"),
            )
        }

    return _apply(options, build)


def sampling_options():
    """``--cfg``, ``--temperature``, ``--top-k`` and ``--top-p`` alone, handed over as ``sampling``
    (only what the user set)."""
    return _apply(SAMPLING_OPTIONS, lambda kw: {"sampling": sampling_of(kw)})


def decoding_options(method: str = "auto", window: str = "auto"):
    """The options ``generate`` and ``generate-video`` share, handed over as ``decoding: Decoding``."""
    options = [
        click.option(
            "--method",
            default=method,
            show_default=True,
            help="A preset, or parts joined by + such as scd-gs+pac+vp (see `jacobigen methods`); 'auto': the "
            "lossless method (ar included) that runs fastest on this machine, measured once per model, device, "
            "threads and sampling and cached.",
        ),
        click.option(
            "--window",
            default=window,
            show_default=True,
            type=Window(),
            help="Tokens in flight per iteration (at most the image's tokens + 4096); 'auto': the fastest here.",
        ),
        click.option(
            "--seed",
            default=0,
            show_default=True,
            type=click.IntRange(0, MAX_SEED),
            help="Image (clip) i gets seed SEED + i.",
        ),
        click.option(
            "--batch-size",
            type=click.IntRange(min=1),
            default=None,
            help="Images decoded together (default: all that fit in half the free memory; a named batch may take "
            "90%); finished rows take the next prompt.",
        ),
        *SAMPLING_OPTIONS,
        click.option("--option", "-o", "options", multiple=True, help="Method hyper-parameter, KEY=VALUE."),
        click.option(
            "--stats",
            "stats_path",
            type=click.Path(path_type=Path),
            default=None,
            help="Also write the decoding statistics as JSON.",
        ),
        click.option("--progress/--no-progress", default=True, show_default=True),
        click.option(
            "--deterministic/--no-deterministic",
            default=None,
            help="Each image's tokens bit-identical alone, in any batch and in any block (the forward runs on "
            "row-invariant kernels; docs/api.md gives the price). Without it the distribution is the same, and "
            "a draw within rounding of a boundary may differ with the batch. Default: on with --same-as-ar "
            "(in bfloat16 a block rounds otherwise than a token about once per image), off otherwise.",
        ),
        click.option(
            "--same-as-ar",
            is_flag=True,
            help="Verify with the invariant verifier: the same seed commits exactly --method ar --same-as-ar's "
            "tokens, whatever the method and window (bit for bit: it turns --deterministic on unless "
            "--no-deterministic; docs/cli.md gives the price in forwards). Lossless methods only.",
        ),
        click.option(
            "--cuda-graphs/--no-cuda-graphs",
            default=True,
            show_default=True,
            help="On CUDA, replay each forward as a CUDA graph captured once per block shape (a capture that "
            "fails warns once and runs eagerly); --no-cuda-graphs runs every forward eagerly. --stats records "
            "the path as forward_path.",
        ),
    ]

    def build(kw):
        return {
            "decoding": Decoding(
                method=kw.pop("method"),
                window=kw.pop("window"),
                seed=kw.pop("seed"),
                batch_size=kw.pop("batch_size"),
                sampling=sampling_of(kw),
                options=options_of(kw.pop("options")),
                stats_path=kw.pop("stats_path"),
                progress=kw.pop("progress"),
                deterministic=kw.pop("deterministic"),
                cuda_graphs=kw.pop("cuda_graphs"),
                same_as_ar=kw.pop("same_as_ar"),
                window_given=click.get_current_context().get_parameter_source("window") is not ParameterSource.DEFAULT,
            )
        }

    return _apply(options, build)
