"""training/make_clips.py on a few fake emoji: deterministic clips, every motion moves or recolours,
the still style keeps most of the frame."""

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

SPEC = importlib.util.spec_from_file_location("make_clips", Path(__file__).parents[2] / "training" / "make_clips.py")
mc = importlib.util.module_from_spec(SPEC)
sys.modules["make_clips"] = mc  # dataclasses look their module up while the file runs
SPEC.loader.exec_module(mc)


def fake_images(n=3):
    """White 64x64 images with an off-centre coloured blob, so that every motion shows."""
    imgs = np.full((n, 64, 64, 3), 255, dtype=np.uint8)
    for i in range(n):
        imgs[i, 20:40, 16:36] = (200, 30 * i, 60)
        imgs[i, 22:26, 30:44] = (20, 20, 20)
    return imgs


@pytest.mark.parametrize("style", ["still", "moving"])
def test_clips_are_deterministic_in_the_seed(style):
    imgs, caps = fake_images(), ["red heart", "sun", "pizza"]
    a, rec_a = mc.make_clips(imgs, caps, frames=5, per_image=2, seed=3, style=style)
    b, rec_b = mc.make_clips(imgs, caps, frames=5, per_image=2, seed=3, style=style)
    c, _ = mc.make_clips(imgs, caps, frames=5, per_image=2, seed=4, style=style)
    assert a.shape == (6, 5, 64, 64, 3) and a.dtype == np.uint8
    assert np.array_equal(a, b) and rec_a == rec_b and not np.array_equal(a, c)
    assert [r["image"] for r in rec_a] == [0, 0, 1, 1, 2, 2]
    assert all(r["caption"].startswith(caps[r["image"]] + " ") for r in rec_a)


@pytest.mark.parametrize("factory", mc.GEOMETRIC + mc.COLOUR)
def test_every_motion_changes_the_frames(factory):
    motion = factory(np.random.default_rng(0))
    clip = mc.make_clip(fake_images(1)[0], [motion], frames=4)
    assert clip.shape == (4, 64, 64, 3)
    assert any(not np.array_equal(clip[0], f) for f in clip[1:]), motion.words
    assert motion.words


@pytest.mark.parametrize("factory", [f for f in mc.STILL_GEOMETRIC + mc.LOCAL if f is not mc.hold])
def test_every_still_motion_changes_the_frames_a_little(factory):
    motion = factory(np.random.default_rng(1))
    clip = mc.make_clip(fake_images(1)[0], [motion], frames=8).astype(int)
    changed = [np.abs(a - b).max(-1) > 8 for a, b in zip(clip[:-1], clip[1:], strict=True)]
    assert any(c.any() for c in changed), motion.words
    assert max(c.mean() for c in changed) < 0.2, motion.words  # a few pixels of a 64x64 frame


def test_hold_and_held_frames_repeat_exactly():
    img = fake_images(1)[0]
    still = mc.make_clip(img, [mc.hold(np.random.default_rng(0))], frames=4, place=mc.Pose(3, -2, 0.7))
    assert all(np.array_equal(still[0], f) for f in still[1:])
    times = [0.0, 0.0, 0.5, 0.5, 1.0]
    moved = mc.make_clip(img, [mc.drift(np.random.default_rng(0))], frames=5, times=times)
    assert np.array_equal(moved[0], moved[1]) and np.array_equal(moved[2], moved[3])
    assert not np.array_equal(moved[1], moved[2])


def test_fits_and_starts_hold_and_reach_the_end():
    rng = np.random.default_rng(0)
    for move in (0.0, 0.5, 1.0):
        times = mc.fits_and_starts(rng, 8, move)
        assert len(times) == 8 and times[0] == 0 and all(a <= b for a, b in zip(times[:-1], times[1:], strict=True))
        assert times[-1] == (0.0 if move == 0 else 1.0)
    assert mc.fits_and_starts(rng, 8, 1.0) == [f / 7 for f in range(8)]


def test_unchanged_share_counts_cells_equal_one_frame_back():
    tokens = np.zeros((2, 3, 16, 16), dtype=np.int16)
    tokens[0, 1, :8] = 1  # frame 1 differs from 0 in half its cells, and frame 2 from 1 in the same half
    assert mc.unchanged_share(tokens) == pytest.approx(1 - 2 * 128 / (2 * 2 * 256))


def test_render_turns_counterclockwise_like_pillow():
    img = Image.fromarray(fake_images(1)[0])
    ours = np.asarray(mc.render(img, mc.Pose(angle=30))).astype(int)
    pillow = np.asarray(img.rotate(30, resample=Image.BICUBIC, fillcolor=mc.WHITE)).astype(int)
    assert np.abs(ours - pillow).mean() < 2
    shifted = np.asarray(mc.render(img, mc.Pose(dx=5)))
    assert np.array_equal(shifted[:, 21:41], np.asarray(img)[:, 16:36])


def test_main_writes_clips_and_records(tmp_path):
    np.save(tmp_path / "images.npy", fake_images())
    (tmp_path / "captions.json").write_text(json.dumps(["red heart", "sun", "pizza"]))
    mc.main(["--data", str(tmp_path), "--out", str(tmp_path / "clips"), "--frames", "4", "--limit", "2"])
    clips = np.load(tmp_path / "clips" / "clips.npy")
    meta = json.loads((tmp_path / "clips" / "clips.json").read_text())
    assert clips.shape == (4, 4, 64, 64, 3) and meta["frames"] == 4 and len(meta["clips"]) == 4
    assert meta["style"] == "still" and "unchanged_share" not in meta


def test_main_tokenizes_and_reports_the_unchanged_share(tmp_path, capsys):
    np.save(tmp_path / "images.npy", fake_images(1))
    (tmp_path / "captions.json").write_text(json.dumps(["red heart"]))
    mc.main(["--data", str(tmp_path), "--out", str(tmp_path / "clips"), "--frames", "3", "--tokenize"])
    tokens = np.load(tmp_path / "clips" / "tokens.npy")
    meta = json.loads((tmp_path / "clips" / "clips.json").read_text())
    assert tokens.shape == (2, 3, 16, 16) and tokens.dtype == np.int16
    assert meta["unchanged_share"] == round(mc.unchanged_share(tokens), 4)
    assert "unchanged-token share" in capsys.readouterr().out


def test_drift_reaches_its_range_and_records_name_their_clip():
    rng = np.random.default_rng(0)
    for _ in range(20):
        end = mc.drift(rng, (8.0, 16.0)).pose(1.0)
        assert 8 <= abs(end.dx) + abs(end.dy) <= 16
    _, records = mc.make_clips(fake_images(2), ["red heart", "sun"], frames=3, per_image=2, seed=0)
    assert [(r["image"], r["clip"]) for r in records] == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_names_make_clips_of_each_curated_names_image_in_one_set_only(tmp_path, monkeypatch):
    import vocabulary

    monkeypatch.setattr(vocabulary, "NAMES", {"hearts": ["red heart"], "nature": ["sun"]})
    monkeypatch.setattr(vocabulary, "ALIASES", {})
    captions = ["red heart", "sun", "red heart", "cat face", "sun"]
    np.save(tmp_path / "images.npy", fake_images(5))
    (tmp_path / "captions.json").write_text(json.dumps(captions))
    (tmp_path / "keywords.json").write_text(json.dumps([{"tags": [], "group": "", "subgroup": ""}] * 5))
    (tmp_path / "sources.json").write_text(json.dumps(["noto", "noto", "twemoji", "twemoji", "twemoji"]))
    out = tmp_path / "clips"
    mc.main(["--data", str(tmp_path), "--out", str(out), "--frames", "3", "--names", "twemoji", "--reach", "8", "16"])
    meta = json.loads((out / "clips.json").read_text())
    assert sorted({c["image"] for c in meta["clips"]}) == [2, 4]  # twemoji's heart and sun; no cat face
    assert meta["names"] == ["twemoji"] and meta["reach"] == [8.0, 16.0]


def test_clip_motion_reads_a_drift_from_the_ink_and_only_the_named_way():
    import clip_motion

    imgs = fake_images(1)
    clip = mc.make_clip(imgs[0], [mc.Motion("drifting left", lambda t: mc.Pose(-12 * t, 0))], frames=7)
    path = [clip_motion.centroid(f) for f in clip]
    assert path[0][0] - path[-1][0] == pytest.approx(12, abs=0.5) and path[0][1] == pytest.approx(path[-1][1])
    assert clip_motion.moved(path, "left") and not clip_motion.moved(path, "right")
    assert not clip_motion.moved(path[:2], "left")  # 2 px: under a code
    assert clip_motion.direction_of("red heart drifting left") == "left" and clip_motion.direction_of("sun") is None
    from PIL import Image

    frames = [Image.fromarray(f) for f in clip]
    sheet = np.asarray(clip_motion.contact_sheet([frames, frames[:3]], size=64))
    assert sheet.shape == (128, 7 * 64, 3) and (sheet[64:, 3 * 64 :] == 255).all()  # a short clip leaves white
    assert (sheet[:64, 6 * 64 :] == clip[6]).all()


def test_a_stepped_drift_moves_whole_codes_and_drifts_take_their_share():
    rng = np.random.default_rng(1)
    for _ in range(10):
        m = mc.drift(rng, (8.0, 16.0), step=4.0)
        shifts = [abs(m.pose(t).dx) + abs(m.pose(t).dy) for t in np.linspace(0, 1, 9)]
        assert all(s % 4 == 0 for s in shifts) and 8 <= shifts[-1] <= 16
    glide = mc.drift(np.random.default_rng(3), (28.0, 28.0), step=4.0, centred=True)
    assert [glide.pose(f / 7).dx + glide.pose(f / 7).dy for f in range(8)] in (
        [s * (4 * f - 12) for f in range(8)] for s in (1, -1)
    )  # one code a frame, from 12 px back to 16 px on: never the copy, never far off
    rng = np.random.default_rng(2)
    kinds = [mc.choose_still(rng, 0.0, drifts=0.5)[0].words.startswith("drifting") for _ in range(400)]
    assert 0.43 < np.mean(kinds) < 0.57


def test_clip_direction_scores_the_frames_after_the_first_only():
    """Under a model that knows nothing (uniform logits), the NLL is log V per token of frames 2..F,
    and nothing for the caption or the first frame, which the direction cannot change."""
    import math

    import clip_direction
    import torch

    from jacobigen.models import embedded as E

    vocab = 64

    def uniform(x):
        return torch.zeros(*x.shape, vocab)

    clip = [0] * (3 * E.CLIP_FRAME_TOKENS)  # three frames
    nll = clip_direction.later_frames_nll(uniform, [1, 2, 3, 4], clip)
    assert nll == pytest.approx(2 * E.CLIP_FRAME_TOKENS * math.log(vocab))
