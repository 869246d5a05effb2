"""training/make_clips.py on a few fake emoji: deterministic clips, every motion moves or recolours."""

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


def test_clips_are_deterministic_in_the_seed():
    imgs, caps = fake_images(), ["red heart", "sun", "pizza"]
    a, rec_a = mc.make_clips(imgs, caps, frames=5, per_image=2, seed=3)
    b, rec_b = mc.make_clips(imgs, caps, frames=5, per_image=2, seed=3)
    c, _ = mc.make_clips(imgs, caps, frames=5, per_image=2, seed=4)
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
