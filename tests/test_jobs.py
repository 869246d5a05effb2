"""Prompt files as jobs: one image and record each, written idempotently; locally or on Ray."""

import json
import os
import signal

import pytest
from click.testing import CliRunner

from jacobigen.cli import main
from jacobigen.errors import ConfigError
from jacobigen.files import read_prompts
from jacobigen.jobs import Outputs, plan, run_local
from jacobigen.pipeline import random_pipeline

OPTIONS = dict(method="sjd", window=8)


def test_prompt_file_parsing(tmp_path):
    f = tmp_path / "p.txt"
    f.write_text("red heart\n\n# a comment\n  blue car  \n")
    assert read_prompts(f) == ["red heart", "blue car"]
    jobs = plan(read_prompts(f), num_images=2, seed=10)
    assert [(j.index, j.prompt, j.seed) for j in jobs] == [
        (0, "red heart", 10), (1, "red heart", 11), (2, "blue car", 12), (3, "blue car", 13)]
    f.write_text("# nothing\n")
    with pytest.raises(ConfigError, match="no prompts"):
        read_prompts(f)
    with pytest.raises(ConfigError, match="cannot read"):
        read_prompts(tmp_path / "missing.txt")


def test_local_run_is_idempotent(tmp_path):
    pipe = random_pipeline()
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
    summary = out.summarise(jobs)
    assert summary["images"] == 3 and summary["missing"] == 0 and summary["step_compression"] > 1
    assert json.loads((tmp_path / "stats.json").read_text()) == summary


def test_cli_prompts_file(tmp_path):
    f = tmp_path / "prompts.txt"
    f.write_text("red heart\nblue car\n")
    args = ["generate", "--model", "random", "--prompts", str(f), "--num-images", "2", "--batch-size", "3",
            "--window", "8", "--out-dir", str(tmp_path / "out"), "--no-progress"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "4 image(s): 0 already" in res.output
    assert sorted(p.name for p in (tmp_path / "out").glob("*.png")) == [f"0000{i}.png" for i in range(4)]
    assert json.loads((tmp_path / "out" / "00003.json").read_text())["seed"] == 3
    again = CliRunner().invoke(main, args)
    assert "4 already" in again.output and "made 0" in again.output


@pytest.mark.slow
def test_ray_survives_a_killed_worker(tmp_path):
    pytest.importorskip("ray")
    from jacobigen.distributed import run_ray

    jobs, out = plan([f"prompt {i}" for i in range(6)]), Outputs(tmp_path)
    pids, killed = [], []

    def kill_busy_worker(job, record):
        # the first image is back: kill the other worker, which is decoding its chunk
        if not killed:
            victim = next(p for p in pids if p != record["worker_pid"])
            os.kill(victim, signal.SIGKILL)
            killed.append(victim)

    run = run_ray("random", jobs, out, workers=2, chunk=1, on_start=pids.extend, on_result=kill_busy_worker,
                  **OPTIONS)
    assert killed and out.pending(jobs) == []
    summary = out.summarise(jobs, **run)
    assert summary["images"] == 6 and summary["missing"] == 0
    assert run["restarts"] >= 1     # a fresh process took over the dead worker's chunk


def test_cli_job_errors_are_clear(tmp_path):
    res = CliRunner().invoke(main, ["generate", "--model", "random"])
    assert res.exit_code != 0 and "give PROMPTS or --prompts FILE" in res.output
    res = CliRunner().invoke(main, ["generate", "--model", "random", "--prompts", str(tmp_path / "none.txt")])
    assert res.exit_code != 0 and "cannot read prompts file" in res.output and "Traceback" not in res.output
