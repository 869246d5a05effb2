"""Prompt files as jobs: one image and record each, written idempotently; locally or on Ray."""

import io
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from PIL import Image

from jacobigen.cli import main
from jacobigen.core.errors import ConfigError
from jacobigen.models import random_bundle
from jacobigen.tools.files import read_prompts
from jacobigen.tools.jobs import Outputs, check_folder, plan, run_local, started_with
from tests.helpers.need import need

OPTIONS = dict(method="sjd", window=8)
SRC = Path(__file__).parents[2] / "src"


def test_prompt_file_parsing(tmp_path):
    f = tmp_path / "p.txt"
    f.write_text("red heart\n\n# a comment\n  blue car  \n")
    assert read_prompts(f) == ["red heart", "blue car"]
    jobs = plan(read_prompts(f), num_images=2, seed=10)
    assert [(j.index, j.prompt, j.seed) for j in jobs] == [
        (0, "red heart", 10),
        (1, "red heart", 11),
        (2, "blue car", 12),
        (3, "blue car", 13),
    ]
    f.write_bytes(b"red heart\rblue car\r\r# a comment\rgreen tree\r\ncaf\xc3\xa9")  # bare CRs, as old Macs wrote
    assert read_prompts(f) == ["red heart", "blue car", "green tree", "café"]
    f.write_bytes(b"red heart\rcaf\xe9\r")
    with pytest.raises(ConfigError, match="line 2: not UTF-8 \\(byte 0xe9 at column 4"):
        read_prompts(f)
    f.write_text("# nothing\n")
    with pytest.raises(ConfigError, match="no prompts"):
        read_prompts(f)
    with pytest.raises(ConfigError, match="cannot read"):
        read_prompts(tmp_path / "missing.txt")


def test_local_run_is_idempotent(tmp_path):
    pipe = random_bundle()
    jobs, out = plan(["red heart", "blue car", "green tree"]), Outputs(tmp_path)
    made = []
    run_local(pipe, jobs, out, batch_size=2, chunk=2, on_result=lambda j, r: made.append(j.index), **OPTIONS)
    assert sorted(made) == [0, 1, 2] and out.pending(jobs) == []
    png = (tmp_path / "00001.png").read_bytes()
    # a rerun makes nothing; a changed prompt or a broken record redoes just that image
    jobs[2:] = plan(["red heart", "blue car", "yellow star"])[2:]
    (tmp_path / "00000.json").write_text("{broken")
    made.clear()
    run_local(pipe, jobs, out, batch_size=2, chunk=2, on_result=lambda j, r: made.append(j.index), **OPTIONS)
    assert sorted(made) == [0, 2]
    assert (tmp_path / "00001.png").read_bytes() == png
    # a garbage PNG under an intact record is redone; so is every image made with other settings
    (tmp_path / "00001.png").write_bytes(b"not a png")
    assert out.survey(jobs) == {"image missing or does not decode": [jobs[1]]}
    other = Outputs(tmp_path, {"method": "sjd-pac"})
    assert [j.index for j in other.survey(jobs)["made with another method ('sjd', now 'sjd-pac')"]] == [0, 1, 2]
    made.clear()
    run_local(pipe, jobs, out, batch_size=2, chunk=2, on_result=lambda j, r: made.append(j.index), **OPTIONS)
    assert made == [1] and (tmp_path / "00001.png").read_bytes() == png
    summary = out.summarise(jobs)
    assert summary["images"] == 3 and summary["missing"] == 0 and summary["step_compression"] > 1
    assert json.loads((tmp_path / "stats.json").read_text()) == summary


def _finished(out: Outputs, jobs, **record) -> None:
    """Records and decodable PNGs for ``jobs``, as a run with ``out``'s settings leaves them."""
    buf = io.BytesIO()
    Image.new("RGB", (4, 4)).save(buf, format="PNG")
    for job in jobs:
        out.write(job, buf.getvalue(), record)


def test_a_shifted_seed_is_one_reason_not_one_per_image(tmp_path):
    _finished(Outputs(tmp_path, {"method": "sjd"}), plan(["red heart", "blue car"], num_images=3))
    survey = Outputs(tmp_path, {"method": "sjd"}).survey(plan(["red heart", "blue car"], num_images=3, seed=5))
    assert (
        list(survey) == ["made with another seed (0, now 5)"] and len(survey["made with another seed (0, now 5)"]) == 6
    )


def test_the_folder_check_follows_symlinks_as_the_writer_does(tmp_path):
    (tmp_path / "00000.png").symlink_to(tmp_path / "elsewhere.png")  # dangling: writing creates the target
    (tmp_path / "00007.json").mkdir()  # past the run's jobs: not its file
    (tmp_path / "notes.json").mkdir()
    check_folder(tmp_path, 3)
    (tmp_path / "00001.json").symlink_to("/dev/null")
    with pytest.raises(ConfigError, match="00001.json is a device, where the run writes a file"):
        check_folder(tmp_path, 3)


AUTO = {"method": "auto", "window": None}
SETTINGS = {"model": "random", "options": {}, "sampling": {}}


@pytest.mark.parametrize(
    "method, window, auto",
    [
        ("gsd", 8, AUTO),  # lossy
        ("no-such-method", 8, AUTO),
        ("sjd-pac", 16, {"method": "scd-gs", "window": None}),  # not the method named
        ("scd-gs", 16, {"method": "auto", "window": 8}),  # not the window named
    ],
)
def test_an_edited_record_cannot_make_auto_resume_with_a_method_it_never_chooses(tmp_path, method, window, auto):
    jobs = plan(["red heart"])
    _finished(Outputs(tmp_path, SETTINGS), jobs, auto=auto, method=method, window=window)
    with pytest.raises(ConfigError, match=f"00000.json says --method {auto['method']} chose {method} at window"):
        started_with(tmp_path, jobs, SETTINGS, auto)


@pytest.mark.parametrize(
    "method, window, auto", [("scd-gs", 16, AUTO), ("ar", 1, {"method": "auto", "window": 8}), ("sjd", 8, AUTO)]
)
def test_a_record_auto_could_have_made_is_resumed(tmp_path, method, window, auto):
    jobs = plan(["red heart"])
    _finished(Outputs(tmp_path, SETTINGS), jobs, auto=auto, method=method, window=window)
    assert started_with(tmp_path, jobs, SETTINGS, auto) == (method, window)


def test_a_rerun_for_another_target_redoes_the_images_both_ways(tmp_path):
    need("torchao")
    f = tmp_path / "p.txt"
    f.write_text("red heart\n")
    args = ["generate", "--model", "random", "--prompts", str(f), "--out-dir", str(tmp_path / "out"), "--no-progress"]
    args += ["--method", "sjd", "--window", "8"]
    assert CliRunner().invoke(main, [*args, "--quantize", "int8"]).exit_code == 0
    full = CliRunner().invoke(main, args)
    assert full.exit_code == 0, full.output
    assert "redoing 1 image(s) (00000.png ...): made for another target (quantize int8, now none" in full.output
    back = CliRunner().invoke(main, [*args, "--quantize", "int8"])
    assert "redoing 1 image(s) (00000.png ...): made for another target (quantize none (full precision), now int8)" in (
        back.output
    )


def test_cli_prompts_file(tmp_path):
    f = tmp_path / "prompts.txt"
    f.write_text("red heart\nblue car\n")
    args = [
        "generate",
        "--model",
        "random",
        "--prompts",
        str(f),
        "--num-images",
        "2",
        "--batch-size",
        "3",
        "--window",
        "8",
        "--out-dir",
        str(tmp_path / "out"),
        "--no-progress",
    ]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "4 image(s): 0 already" in res.output
    assert sorted(p.name for p in (tmp_path / "out").glob("*.png")) == [f"0000{i}.png" for i in range(4)]
    assert json.loads((tmp_path / "out" / "00003.json").read_text())["seed"] == 3
    again = CliRunner().invoke(main, args)
    assert "4 already" in again.output and "made 0" in again.output


@pytest.mark.slow
def test_ray_survives_a_killed_worker(tmp_path):
    need("ray")
    from jacobigen.tools.distributed import run_ray

    jobs, out = plan([f"prompt {i}" for i in range(6)]), Outputs(tmp_path)
    pids, killed = [], []

    def kill_busy_worker(job, record):
        # the first image is back: kill the other worker, which is decoding its chunk
        if not killed:
            victim = next(p for p in pids if p != record["worker_pid"])
            os.kill(victim, signal.SIGKILL)
            killed.append(victim)

    run = run_ray("random", jobs, out, workers=2, chunk=1, on_start=pids.extend, on_result=kill_busy_worker, **OPTIONS)
    assert killed and out.pending(jobs) == []
    summary = out.summarise(jobs, **run)
    assert summary["images"] == 6 and summary["missing"] == 0
    assert run["restarts"] >= 1  # a fresh process took over the dead worker's chunk


def test_cli_job_errors_are_clear(tmp_path):
    res = CliRunner().invoke(main, ["generate", "--model", "random"])
    assert res.exit_code != 0 and "give PROMPTS or --prompts FILE" in res.output
    res = CliRunner().invoke(main, ["generate", "--model", "random", "--prompts", str(tmp_path / "none.txt")])
    assert res.exit_code != 0 and "cannot read prompts file" in res.output and "Traceback" not in res.output


def test_cli_rerun_with_other_settings_redoes_the_images(tmp_path):
    f = tmp_path / "prompts.txt"
    f.write_text("\ufeffred heart\nblue car\n")  # a byte-order mark is not part of the prompt
    args = [
        "generate",
        "--model",
        "random",
        "--prompts",
        str(f),
        "--window",
        "8",
        "--out-dir",
        str(tmp_path / "out"),
        "--no-progress",
    ]
    assert CliRunner().invoke(main, args + ["--method", "sjd"]).exit_code == 0
    rec = json.loads((tmp_path / "out" / "00000.json").read_text())
    assert rec["prompt"] == "red heart" and rec["method"] == "sjd" and rec["weights"] == "random:seed=0"
    again = CliRunner().invoke(main, args + ["--method", "scd-mc"])
    assert again.exit_code == 0, again.output
    assert (
        "0 already in" in again.output
        and "redoing 2 image(s)" in again.output
        and "'sjd', now 'scd-mc'" in again.output
    )
    assert json.loads((tmp_path / "out" / "00001.json").read_text())["method"] == "scd-mc"


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "jacobigen.cli", "generate", *args]


def _snapshot(folder) -> dict[str, tuple[bytes, str]]:
    """Finished images (a record present): each record must be whole and its PNG must decode."""
    out = {}
    for rec in sorted(folder.glob("*.json")):
        if rec.name == "stats.json":
            continue
        json.loads(rec.read_text())
        png = rec.with_suffix(".png")
        with Image.open(png) as img:
            img.verify()
        out[rec.stem] = (png.read_bytes(), rec.read_text())
    return out


def _kill_during_work(proc: subprocess.Popen, out: Path, finished: int, rnd: random.Random) -> None:
    """SIGKILL ``proc`` at a random moment after it finished one more image than ``finished``."""
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline and len(list(out.glob("0*.json"))) <= finished:
        time.sleep(0.02)
    time.sleep(rnd.uniform(0.0, 0.5))
    proc.send_signal(signal.SIGKILL)
    proc.wait()


@pytest.mark.slow
def test_killed_prompt_run_resumes_with_nothing_lost_or_redone(tmp_path):
    """SIGKILL a --prompts run at random moments, three times, then rerun: every file on disk is
    whole after each kill, the rerun makes exactly the missing images, and no finished image is
    made again."""
    f = tmp_path / "prompts.txt"
    f.write_text("".join(f"prompt {i}\n" for i in range(8)))
    out = tmp_path / "out"
    args = _cli(
        "--model",
        "random",
        "--prompts",
        str(f),
        "--window",
        "8",
        "--chunk",
        "1",
        "--out-dir",
        str(out),
        "--no-progress",
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    rnd = random.Random(19)
    seen: dict = {}
    for _ in range(3):
        proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _kill_during_work(proc, out, len(seen), rnd)
        now = _snapshot(out)
        assert all(now[k] == v for k, v in seen.items())  # nothing finished was touched
        seen = now
    assert len(seen) >= 3  # each kill came after an image
    res = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert f"8 image(s): {len(seen)} already in" in res.stdout and f"made {8 - len(seen)} in" in res.stdout
    final = _snapshot(out)
    assert len(final) == 8 and all(final[k] == v for k, v in seen.items())
    assert not list(out.glob(".*.tmp"))  # killed runs' temporaries swept
