"""Video layout: frames of rows x cols with end-of-line, end-of-frame and end-of-clip tokens.

Every lossless preset samples exactly the AR distribution of a tiny 2-frame clip (the enumerable
model of ``jacobigen.tools.exactness``: 2 frames of 1 x 3 cells, 729 clips; 2 x 2 x 2, 6,561 clips, for
PJD's rows), all seven mutants of docs/DESIGN.md §6.2 are rejected there, and PJD runs its rows in
parallel within a frame only.
"""

import dataclasses

import pytest
import torch

from jacobigen import METHODS, ConfigError, generate, get_method
from jacobigen.core.layout import ImageLayout, VideoLayout
from jacobigen.core.sampling import SamplingConfig
from jacobigen.decode.jacobi import JacobiDecoder, Parts
from jacobigen.models.transformer import Transformer, TransformerConfig
from jacobigen.parts.drafters import Copy, Independent
from jacobigen.parts.tree import ProactiveTree
from jacobigen.parts.verifiers import Verifier
from jacobigen.tools.exactness import exact_distribution, gof_pvalue, sample, tiny_model, tv_distance, video_layout
from tests.decode.test_exactness import FAIL, PASS, STRONG_VP, N, RecordingVP
from tests.helpers.mutants import (
    CarryOldQ,
    CopyWithBaseQ,
    MinimumAcceptance,
    ResidualFromTarget,
    ResidualUnlessUnitMass,
    SiblingsWithReplacement,
    StaleQ,
    UnfusedQ,
)

PLAIN, GUIDED = SamplingConfig(), SamplingConfig(cfg=2.0, top_p=0.95, temperature=0.9)
LOSSLESS = [name for name, m in METHODS.items() if m.lossless and name != "ar"]
SMALL_TREE = {"tree_depth": 3, "tree_width": 2}


def test_layout_places_every_structural_token():
    lay = VideoLayout(2, 2, (0, 3), eol_id=3, end_id=4, frames=2, eof_id=5)
    assert lay.frame_length == 7 and lay.length == 15 and lay.cells == 8
    assert lay.forced().tolist() == [-1, -1, 3, -1, -1, 3, 5, -1, -1, 3, -1, -1, 3, 5, 4]
    tokens = torch.arange(lay.length).expand(3, -1)
    assert lay.grid(tokens).shape == (3, 2, 2, 2)
    assert lay.grid(tokens)[0].tolist() == [[[0, 1], [3, 4]], [[7, 8], [10, 11]]]
    lines = lay.lines()
    assert lines.start.tolist() == [0, 3, 7, 10] and lines.length.tolist() == [3, 4, 3, 5]
    assert lines.opens_frame.tolist() == [False, False, True, False]
    bare = VideoLayout(2, 3, (0, 10), frames=3)  # Cosmos: no structural tokens at all
    assert bare.length == 18 and (bare.forced() < 0).all() and bare.grid(torch.arange(18)).shape == (3, 2, 3)
    # an image is a one-frame clip whose grid drops the frame axis
    image = ImageLayout(2, 3, (0, 3), eol_id=3, end_id=4)
    assert image.grid(torch.arange(image.length)).shape == (2, 3) and image.frames == 1
    for bad in [dict(frames=0), dict(frames=True), dict(frames=2, eof_id=1)]:
        with pytest.raises(ConfigError):
            VideoLayout(2, 2, (0, 3), **bad)


@pytest.fixture(scope="module")
def clip():
    model, lay = tiny_model(vocab=9), video_layout()
    exact = {s: exact_distribution(model, lay, s) for s in (PLAIN, GUIDED)}
    return model, lay, exact


def clip_pvalue(clip, parts, sampling=PLAIN):
    model, lay, exact = clip
    return gof_pvalue(exact[sampling], sample(model, lay, sampling, parts, N))


@pytest.mark.slow
@pytest.mark.parametrize("method", LOSSLESS)
def test_every_lossless_preset_is_exact_on_a_clip(clip, method):
    spec = METHODS[method]
    opts = {k: v for k, v in SMALL_TREE.items() if k in spec.options}
    sampling = GUIDED if LOSSLESS.index(method) % 2 else PLAIN
    assert clip_pvalue(clip, spec.build(6, **opts), sampling) > PASS


@pytest.mark.slow
@pytest.mark.parametrize(
    "name,parts",
    [
        ("1-residual-from-p", Parts(Independent(), ResidualFromTarget(), 4)),
        ("2-old-q-after-coupling", Parts(CarryOldQ(), Verifier(), 4)),
        ("3-stale-q", Parts(StaleQ(), Verifier(), 4)),
        ("6-residual-fallback", Parts(Independent(), ResidualUnlessUnitMass(), 4)),
        ("7-min-acceptance", Parts(Independent(), MinimumAcceptance(), 4)),
    ],
)
def test_mutants_are_rejected_on_a_clip(clip, name, parts):
    assert clip_pvalue(clip, parts) < FAIL


@pytest.fixture(scope="module")
def sharp_clip():
    """A sharper model (as the image tests use for mutants 4 and 5): stale beliefs are often wrong."""
    model, lay = tiny_model(vocab=9, sharpness=3.0), video_layout()
    return model, lay, {PLAIN: exact_distribution(model, lay, PLAIN)}


@pytest.mark.slow
def test_tree_mutant_rejected_on_a_clip(sharp_clip):
    """Mutant 5 (siblings drawn with replacement, verified as without): the full 3-wide tree over
    the 3 ids. Measured: correct p = 0.41, mutant p < 1e-300 (TV 0.079)."""
    assert clip_pvalue(sharp_clip, Parts(Independent(), Verifier(), 13, ProactiveTree(3, 3, "full"))) > PASS
    assert clip_pvalue(sharp_clip, Parts(Independent(), Verifier(), 13, SiblingsWithReplacement(3, 3, "full"))) < FAIL


@pytest.mark.slow
def test_vp_mutant_rejected_on_a_clip(sharp_clip):
    """Mutant 4 (verified against the unfused p) with the strong fusion of the image test, at a
    window spanning the whole clip (11 tokens), where fusion moves q most often: measured p = 5e-31
    (window 6: 0.008, too weak to assert). The correct VP passes at the same settings."""
    RecordingVP.moved = 0.0
    assert clip_pvalue(sharp_clip, Parts(RecordingVP(Independent(), **STRONG_VP), Verifier(), 11)) > PASS
    assert RecordingVP.moved > 0.5
    assert clip_pvalue(sharp_clip, Parts(UnfusedQ(Independent(), **STRONG_VP), Verifier(), 11)) < FAIL


# --- PJD: rows in parallel within a frame --------------------------------------------------------


@pytest.fixture(scope="module")
def rows_clip():
    model, lay = tiny_model(vocab=9), video_layout(2, 2, 2)
    return model, lay, exact_distribution(model, lay, PLAIN)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["pjd", "pjd+scd-mc+pac"])
def test_pjd_one_row_at_a_time_is_exact_on_a_clip(rows_clip, method):
    model, lay, exact = rows_clip
    options = SMALL_TREE if "pac" in method else {}
    samples = sample(model, lay, PLAIN, METHODS[method].build(4, pjd_context=lay.cols, **options), N)
    assert gof_pvalue(exact, samples) > PASS


@pytest.mark.slow
def test_pjd_lossy_context_is_measured_on_a_clip(rows_clip):
    """c = 1 < C: lower rows of a frame see an incomplete row above. Measured p < 1e-130 and TV
    0.093-0.096 over two seed ranges (c = C: p = 0.58, TV 0.040, the noise floor of 6,561 clips)."""
    model, lay, exact = rows_clip
    samples = sample(model, lay, PLAIN, METHODS["pjd"].build(4, pjd_context=1), N)
    assert gof_pvalue(exact, samples) < FAIL
    assert 0.06 < tv_distance(exact, samples) < 0.2


def random_clip_model(seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(TransformerConfig(vocab_size=70, dim=32, n_layers=2, n_heads=4, max_seq_len=200)).eval()


CLIP = VideoLayout(4, 5, (0, 64), eol_id=64, end_id=65, frames=3, eof_id=66)


@pytest.mark.parametrize("method", ["pjd", "pjd+scd-mc"])
def test_pjd_greedy_one_row_at_a_time_matches_ar_on_a_clip(method):
    model, kw = random_clip_model(), dict(layout=CLIP, top_k=1, cfg=2.0, uncond=[68])
    ar = generate(model, [67, 1, 2], method="ar", **kw).tokens
    gen = generate(model, [67, 1, 2], method=method, window=6, pjd_context=CLIP.cols, **kw)
    assert torch.equal(gen.tokens, ar)


def test_pjd_rows_run_in_parallel_within_a_frame_only():
    """c = 1: a frame's rows overlap, but no row of the next frame is in flight before the frame
    is complete (end-of-frame token included)."""
    model = random_clip_model()
    dec = JacobiDecoder(model, CLIP, SamplingConfig(), METHODS["pjd"].build(4, pjd_context=1))
    rows = dec.engine.schedule
    real_plan, plans = rows.plan, []

    def plan(cnt, uncached):
        out = real_plan(cnt, uncached)
        plans.append((cnt.clone(), out.rows.clone(), out.window.clone()))
        return out

    rows.plan = plan
    tokens, _ = dec.run([[67, 1, 2]] * 2, [0, 1])
    within, lines = 0, CLIP.lines()
    for cnt, in_flight, window in plans:
        for b in range(cnt.shape[0]):
            active = in_flight[b][window[b]].tolist()
            frames = {r // CLIP.rows for r in active}
            assert len(frames) <= 1, active
            for r in active:
                earlier = torch.arange(r - r % CLIP.rows)
                assert torch.equal(cnt[b, earlier], lines.length[earlier])
            within += len(active) > 1
    assert within > 0
    forced = CLIP.forced()
    assert (tokens[:, forced >= 0] == forced[forced >= 0]).all()


def test_every_lossless_preset_equals_ar_greedy_on_a_clip():
    model, kw = random_clip_model(1), dict(layout=CLIP, top_k=1)
    ar = generate(model, [67, 3], method="ar", **kw).tokens
    for name in LOSSLESS:
        assert torch.equal(generate(model, [67, 3], method=name, window=8, **kw).tokens, ar), name
    assert generate(model, [67, 3], method="sjd", window=8, **kw).grid.shape == (1, 3, 4, 5)


# --- generate-video --------------------------------------------------------------------------------


def run_cli(*args):
    from click.testing import CliRunner

    from jacobigen.cli import main

    return CliRunner().invoke(main, ["generate-video", *args])


def test_generate_video_writes_an_animated_gif_stats_and_trace(tmp_path):
    from PIL import Image

    out = tmp_path / "heart.gif"
    res = run_cli(
        "red heart",
        "--model",
        "random-video",
        "--frames",
        "2",
        "--method",
        "scd-gs",
        "--window",
        "16",
        "--out",
        str(out),
        "--stats",
        str(tmp_path / "s.json"),
        "--trace",
        "--no-progress",
        "--num-clips",
        "2",
    )
    assert res.exit_code == 0, res.output
    assert "scd-gs (lossless)" in res.output and "step compression" in res.output and "2 clip(s)" in res.output
    with Image.open(out) as gif:
        assert gif.n_frames == 2 and gif.size == (256, 128)  # two clips side by side, 128 px each
    assert (tmp_path / "heart.trace.png").is_file() and (tmp_path / "s.json").is_file()


def test_generate_video_refuses_what_it_cannot_make(tmp_path):
    res = run_cli("red heart", "--frames", "9", "--out", str(tmp_path / "x.gif"))
    assert res.exit_code == 2 and "1 to 8 frames" in res.output
    res = run_cli("red heart", "--model", "random-video", "--frames", "9", "--out", str(tmp_path / "x.gif"))
    assert res.exit_code == 2 and "1 to 8 frames" in res.output
    res = run_cli("red heart", "--model", "random", "--out", str(tmp_path / "x.gif"))
    assert res.exit_code == 2 and "makes images" in res.output
    res = run_cli("red heart", "--model", "random-video", "--out", str(tmp_path / "x.jpg"))
    assert res.exit_code == 2 and ".gif" in res.output


def test_random_video_pipeline_decodes_clips_of_the_right_shape():
    from jacobigen.models import random_video_bundle

    pipe = random_video_bundle().with_frames(3)
    gen, clips = pipe.generate(["a", "b"], method="pjd+scd-mc", window=8, seed=0)
    assert gen.grid.shape == (2, 3, 8, 8) and len(clips) == 2 and len(clips[0]) == 3
    assert clips[0][0].size == (8, 8)
    assert pipe.layout.tiled(gen.stats.when).shape == (2, 8, 24)


def test_generate_points_a_clip_model_to_generate_video(tmp_path):
    from click.testing import CliRunner

    from jacobigen.cli import main

    res = CliRunner().invoke(
        main, ["generate", "red heart", "--model", "random-video", "--out", str(tmp_path / "x.png")]
    )
    assert res.exit_code == 2 and "generate-video" in res.output


@pytest.mark.slow
def test_bench_on_a_video_model_tiles_the_acceptance_map_per_frame(tmp_path):
    """Windows up to 128 on a 4-frame clip of 8 x 8 tokens (293 tokens with its structural ones),
    sampled as the command line asks."""
    import json

    from click.testing import CliRunner

    from jacobigen.cli import main

    res = CliRunner().invoke(
        main,
        [
            "bench",
            "--model",
            "random-video",
            "--methods",
            "scd-gs",
            "--window",
            "16,128",
            "--prompts",
            "1",
            "--top-p",
            "0.9",
            "--out",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "bench.json").read_text())
    assert data["sampling"] == {"top_p": 0.9}  # random-video has no sampling of its own
    rows = {(r["method"], r["window"]): r for r in data["rows"]}
    assert rows["scd-gs", 128]["step_compression"] > 1
    assert len(rows["scd-gs", 128]["acceptance"]) == 8 and len(rows["scd-gs", 128]["acceptance"][0]) == 32
    assert (tmp_path / "acceptance.png").is_file()


@pytest.mark.parametrize("method,opts", [("scd-mc+pac", {}), ("pjd+scd-mc", {"pjd_context": 2})])
def test_a_clip_does_not_depend_on_its_batch(method, opts):
    """Continuous refill on clips: three prompts through a batch of one row equal one batch of three
    (bit for bit: the deterministic mode's promise)."""
    kw = dict(layout=CLIP, method=method, window=8, seed=[4, 5, 6], deterministic=True, **opts)
    model = random_clip_model(2)
    prompts = [[67, 1], [67, 2, 3], [67]]
    alone = generate(model, prompts, batch_size=1, **kw).tokens
    assert torch.equal(generate(model, prompts, **kw).tokens, alone)


def test_bench_refuses_fid_on_clips(tmp_path):
    from click.testing import CliRunner

    from jacobigen.cli import main

    res = CliRunner().invoke(main, ["bench", "--model", "random-video", "--fid", "4", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "makes clips" in res.output


# --- the frame copy on a clip: its source one frame back ------------------------------------------


class CountingCopy(Copy):
    """The copy drafter, counting the drafts it copied (``source``: the last call's copied slots)."""

    copied = 0
    source: torch.Tensor | None = None

    def draft(self, slots, draws):
        CountingCopy.source = self.copies(slots, draws)
        CountingCopy.copied += 0 if CountingCopy.source is None else int(CountingCopy.source.sum())
        return super().draft(slots, draws)


class CountingVerifier(Verifier):
    """Exact verification, counting the copied drafts it accepted along the spine (depth d is
    accepted when d <= k and the path runs through block node d). PJD's segments are not counted."""

    accepted = 0

    def verify(self, p, window, m, positions, draws, tree=None, support=None):
        k, nxt, path = super().verify(p, window, m, positions, draws, tree, support)
        source, w = CountingCopy.source, window.tokens.shape[1]
        if source is not None and source.shape == window.tokens.shape:
            depth = torch.arange(1, w + 1)
            kept = (depth <= k[:, None]) & (path[:, 1 : w + 1] == depth)
            CountingVerifier.accepted += int((kept & source).sum())
        return k, nxt, path


@pytest.mark.slow
@pytest.mark.parametrize(
    "method,window,options",
    [
        ("copy", 5, {}),  # a slot entering the window finds the cell one frame back committed
        ("scd-gs+copy", 5, {}),
        ("scd-mc+pac+copy", 6, {**SMALL_TREE, "copy_min_p": 0}),
        ("scd-mc+copy", 6, {"copy_min_p": 0.3}),
    ],
)
def test_frame_copy_is_exact_on_a_clip(clip, method, window, options):
    """The copy drafter's source on a clip is the cell one frame back (4 tokens on this 1 x 3 clip):
    its point mass is the exact q. The drafts are counted: copies were drafted and accepted."""
    parts = counting_parts(method, window, options)
    CountingCopy.copied = CountingVerifier.accepted = 0
    assert clip_pvalue(clip, parts, GUIDED) > PASS
    assert CountingCopy.copied > 1000 and CountingVerifier.accepted > 100, (
        CountingCopy.copied,
        CountingVerifier.accepted,
    )


@pytest.mark.slow
def test_frame_copy_on_pjd_rows_is_exact_on_a_clip(rows_clip):
    """PJD's rows (one row at a time, c = C: exact) with every slot copying where it has a source."""
    model, lay, exact = rows_clip
    parts = counting_parts("pjd+scd-mc+copy", 4, {"pjd_context": lay.cols, "copy_min_p": 0})
    CountingCopy.copied = 0
    assert gof_pvalue(exact, sample(model, lay, PLAIN, parts, N)) > PASS
    assert CountingCopy.copied > 1000


def counting_parts(method, window, options):
    """The method's parts with the counting copy drafter and verifier in place of theirs."""
    parts = get_method(method).build(window, **options)
    drafter = parts.drafter
    assert isinstance(drafter, Copy)
    return dataclasses.replace(parts, drafter=CountingCopy(drafter.base, drafter.min_p), verifier=CountingVerifier())


@pytest.mark.slow
def test_frame_copy_mutant_is_rejected_on_a_clip(clip):
    """Mutant: copies verified against the base's q instead of their point mass."""
    assert clip_pvalue(clip, Parts(CopyWithBaseQ(Independent(), 0), Verifier(), 5)) < FAIL
