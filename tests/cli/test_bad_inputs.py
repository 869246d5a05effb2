"""Bad and hostile inputs through the real command line: each ends with a non-zero exit, one line
naming the input (no traceback), and no work done. The table of bad inputs in docs/errors.md is
rendered from CASES (``python tests/cli/test_bad_inputs.py`` prints it), and a test keeps the two equal.

Inputs that fail while arguments are checked run as true subprocesses (no torch import: a fraction
of a second each); those that need torch or a model run in-process through click's runner, and as
subprocesses too under the slow marker.
"""

import os
import re
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from jacobigen.cli import main

ERRORS_PAGE = Path(__file__).parents[2] / "docs" / "errors.md"


@dataclass(frozen=True)
class Case:
    what: str  # the bad input, in words
    args: str  # after `jacobigen generate`; {tmp}/NAME are files the fixture makes, {port} a closed port
    code: int  # exit code
    says: str  # a piece of the message (it names the input)
    early: bool = True  # refused before torch is imported
    writes: str = ""  # an output path that must not exist afterwards (no work was done)


CASES = [
    Case("prompt file with non-UTF-8 bytes", "--prompts {tmp}/latin1.txt", 2, "line 2: not UTF-8 (byte 0xe9"),
    Case("endless prompt file", "--prompts /dev/zero", 2, "line 1: longer than 65536 bytes"),
    Case("missing prompt file", "--prompts {tmp}/missing.txt", 2, "cannot read prompts file"),
    Case("prompt file without prompts", "--prompts {tmp}/comments.txt", 2, "holds no prompts"),
    Case("a folder as prompt file", "--prompts {tmp}", 2, "is a directory"),
    Case("no prompt at all", "", 2, "give PROMPTS or --prompts FILE"),
    Case("a prompt and --prompts", "heart --prompts {tmp}/ok.txt", 2, "not both"),
    Case("--out with --prompts", "--prompts {tmp}/ok.txt --out {tmp}/a.png", 2, "--out writes one sheet"),
    Case("--stats with --prompts", "--prompts {tmp}/ok.txt --stats {tmp}/s.json", 2, "--stats writes one sheet"),
    Case("--trace with --prompts", "--prompts {tmp}/ok.txt --trace", 2, "--trace draws one sheet"),
    Case(
        "--out without an extension",
        "heart --model random --out {tmp}/noext",
        2,
        "names no image format",
        writes="{tmp}/noext",
    ),
    Case("--out in a folder that is a file", "heart --model random --out {tmp}/file/a.png", 2, "cannot write --out"),
    Case("--out naming a folder", "heart --model random --out {tmp}", 2, "is a folder"),
    Case(
        "--stats in a folder that is a file",
        "heart --model random --out {tmp}/b.png --stats {tmp}/file/s.json",
        2,
        "cannot write --stats",
        writes="{tmp}/b.png",
    ),
    Case(
        "--out-dir inside a file",
        "--prompts {tmp}/ok.txt --model random --out-dir {tmp}/file/out",
        2,
        "cannot write --out-dir",
    ),
    # outputs never replace what is at their path, and no two outputs of a run share a file (issue 39)
    Case(
        "--stats naming a device",
        "heart --model random --out {tmp}/d.png --stats /dev/null",
        2,
        "--stats /dev/null is a device, not a regular file",
        writes="{tmp}/d.png",
    ),
    Case("--out naming a FIFO", "heart --model random --out {tmp}/fifo.png", 2, "is a FIFO, not a regular file"),
    Case("--out a symlink to a device", "heart --model random --out {tmp}/null.png", 2, "(-> /dev/null) is a device"),
    Case(
        "--out and --stats the same file",
        "heart --model random --out {tmp}/same.png --stats {tmp}/same.png",
        2,
        "--out and --stats both write",
        writes="{tmp}/same.png",
    ),
    Case(
        "--stats where --trace writes",
        "heart --model random --out {tmp}/t.png --stats {tmp}/t.trace.png --trace",
        2,
        "--stats and --trace both write",
        writes="{tmp}/t.png",
    ),
    Case(
        "an --out name longer than the file system takes",
        "heart --model random --out {tmp}/" + "x" * 250 + ".png",
        2,
        "this file system takes 255: shorten it",
    ),
    Case(
        "a prompt that is not UTF-8",
        "caf\udce9 --model random --out {tmp}/u.png",
        2,
        "prompt 1 is not UTF-8 text (byte 0xe9 at character 4)",
        writes="{tmp}/u.png",
    ),
    Case(
        "more than 10^6 images in one run",
        "--prompts {tmp}/many.txt --num-images 1001 --dry-run",
        2,
        "1000 prompt(s) x 1001 make 1,001,000 images, more than one run makes (1,000,000)",
    ),
    # every file a folder run writes is checked before any work (issue 61)
    Case(
        "a folder named like a record in --out-dir",
        "--prompts {tmp}/ok.txt --model random --method sjd --window 8 --out-dir {tmp}/od1",
        2,
        "od1/00000.json is a folder, where the run writes a file",
        writes="{tmp}/od1/00000.png",
    ),
    Case(
        "a folder named stats.json in --out-dir",
        "--prompts {tmp}/ok.txt --model random --method sjd --window 8 --out-dir {tmp}/od2",
        2,
        "od2/stats.json is a folder, where the run writes a file",
        writes="{tmp}/od2/00000.png",
    ),
    Case(
        "a FIFO at an image of --out-dir",
        "--prompts {tmp}/ok.txt --num-images 3 --model random --method sjd --window 8 --out-dir {tmp}/od3",
        2,
        "od3/00002.png is a FIFO, where the run writes a file",
        writes="{tmp}/od3/00000.png",
    ),
    Case("--size with --prompts", "--prompts {tmp}/ok.txt --size 64", 2, "--size sets the tiles of one sheet"),
    Case("a method option given twice", "heart -o alpha=0.5 -o alpha=0.7", 2, "option alpha is given twice"),
    Case("--threads far above the cores", "heart --threads 100000", 2, "100000 threads on"),
    Case("window 0", "heart --window 0", 2, "'--window': 0 is not in the range x>=1"),
    Case("window not a number", "heart --window many", 2, "'--window': 'many' is not a valid integer"),
    Case("huge image size", "heart --size 100000", 2, "'--size': 100000 is not in the range 8<=x<=4096"),
    Case("100,000 images on one sheet", "heart --num-images 100000", 2, "100000 images, more than one sheet holds"),
    Case("a sheet too many pixels", "heart --size 4096 --num-images 100", 2, "Invalid value for --size"),
    Case("seed 2^64", "heart --seed 18446744073709551616", 2, "'--seed': 18446744073709551616 is not in the range"),
    Case("negative seed", "heart --seed -1", 2, "'--seed': -1 is not in the range"),
    Case("seeds past 2^32 - 1", "heart --seed 4294967295 --num-images 2", 2, "passes the largest seed 4294967295"),
    Case(
        "seeds past 2^32 - 1 in a prompt file",
        "--prompts {tmp}/ok.txt --seed 4294967295 --num-images 3",
        2,
        "passes the largest seed",
    ),
    Case("cfg NaN", "heart --cfg nan", 2, "--cfg must be a finite number, got nan"),
    Case("cfg infinite", "heart --cfg inf", 2, "--cfg must be a finite number, got inf"),
    Case("temperature 0", "heart --temperature 0", 2, "--temperature must be a finite number > 0, got 0.0"),
    Case("negative temperature", "heart --temperature -1", 2, "--temperature must be a finite number > 0"),
    Case("top-p 0", "heart --top-p 0", 2, "--top-p must be a finite number in (0, 1], got 0.0"),
    Case("top-p above 1", "heart --top-p 1.5", 2, "--top-p must be a finite number in (0, 1]"),
    Case("top-k 0", "heart --top-k 0", 2, "'--top-k': 0 is not in the range x>=1"),
    Case("-o seed=3", "heart -o seed=3", 2, "seed is not a method option: use --seed"),
    Case("-o method=ar", "heart -o method=ar", 2, "method is not a method option: use --method"),
    Case("-o batch_size=0", "heart -o batch_size=0", 2, "batch_size is not a method option: use --batch-size"),
    Case("-o without =", "heart -o nokey", 2, "expected key=value, got 'nokey'"),
    Case("--address without --ray", "heart --address 127.0.0.1:1", 2, "--address names a Ray cluster: add --ray"),
    Case("--threads with --ray", "heart --ray --method sjd --window 8 --threads 2", 2, "--threads sets this process's"),
    Case("--ray with --method auto", "heart --ray", 2, "--ray: name --method and --window"),
    Case("0 Ray workers", "heart --ray --workers 0", 2, "'--workers': 0 is not in the range"),
    Case("chunk 0", "--prompts {tmp}/ok.txt --chunk 0", 2, "'--chunk': 0 is not in the range x>=1"),
    Case("an unknown flag", "heart --widow 8", 2, "No such option '--widow'"),
    # need torch (a method's parts, a model, a device)
    Case("unknown method", "heart --method nope", 2, "unknown method 'nope'", early=False),
    Case(
        "unknown method option", "heart --method sjd -o depth=3", 2, "method 'sjd' has no option(s) depth", early=False
    ),
    Case("a method option with --method auto", "heart -o alpha=0.5", 2, "--method auto weighs methods", early=False),
    Case(
        "tree width not a number",
        "heart --method sjd-pac -o tree_width=abc",
        2,
        "tree_width must be an integer >= 1, got 'abc'",
        early=False,
    ),
    Case(
        "a 100-deep tree",
        "heart --method sjd-pac -o tree_depth=100",
        2,
        "tree_depth=100 and tree_width=4 span more than 4096 tree nodes",
        early=False,
    ),
    Case("a 1000-wide tree", "heart --method sjd-pac -o tree_width=1000", 2, "span more than 4096", early=False),
    Case(
        "vp_history as text",
        'heart --method sjd-vp -o vp_history="4"',
        2,
        "vp_history must be an integer in [1, 64], got '4'",
        early=False,
    ),
    Case(
        "vp_weight NaN",
        "heart --method sjd-vp -o vp_weight=NaN",
        2,
        "vp_weight must be a finite number >= 0, got nan",
        early=False,
    ),
    Case(
        "vp_top_k 0", "heart --method sjd-vp -o vp_top_k=0", 2, "vp_top_k must be an integer >= 1, got 0", early=False
    ),
    Case(
        "gsd_k 1.5", "heart --method gsd -o gsd_k=1.5", 2, "gsd_k must be an integer in [0, 256], got 1.5", early=False
    ),
    Case("unknown model", "heart --model nope", 2, "unknown model 'nope'", early=False),
    Case(
        "a device that is not one",
        "heart --model random --device potato",
        2,
        "--device 'potato' is not a device",
        early=False,
    ),
    Case(
        "a CUDA device this machine lacks (random model)",
        "heart --model random --device cuda:99",
        2,
        "--device cuda:99",
        early=False,
    ),
    Case(
        "a CUDA device this machine lacks (default model)", "heart --device cuda:99", 2, "--device cuda:99", early=False
    ),
    Case(
        "window 10^9",
        "heart --model random --window 1000000000 --out {tmp}/w.png",
        2,
        "window 1000000000 is longer than a block can use: the image has 272 tokens",
        early=False,
        writes="{tmp}/w.png",
    ),
    Case(
        "a model size that is not a number",
        "heart --model lumina2:{tmp}/l2?size=abc --dry-run",
        2,
        "model option size='abc': give a whole number of pixels",
        early=False,
    ),
    Case(
        "a checkpoint folder that does not exist",
        "heart --model chameleon:{tmp}/none",
        1,
        "weights not found",
        early=False,
    ),
    Case(
        "a Ray address where nothing listens",
        "--prompts {tmp}/ok.txt --ray --method sjd --window 8 --address 127.0.0.1:{port} --out-dir {tmp}/ray",
        1,
        "cannot reach a Ray head at --address 127.0.0.1:",
        early=False,
    ),
]


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released): no test contacts another address."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bad")
    (tmp / "latin1.txt").write_bytes(b"red heart\ncaf\xe9 au lait\n")
    (tmp / "comments.txt").write_text("# nothing\n\n")
    (tmp / "ok.txt").write_text("red heart\n")
    (tmp / "many.txt").write_text("".join(f"prompt {i}\n" for i in range(1000)))
    (tmp / "file").write_text("a file, not a folder\n")
    os.mkfifo(tmp / "fifo.png")
    (tmp / "od1" / "00000.json").mkdir(parents=True)
    (tmp / "od2" / "stats.json").mkdir(parents=True)
    (tmp / "od3").mkdir()
    os.mkfifo(tmp / "od3" / "00002.png")
    (tmp / "l2").mkdir()
    (tmp / "l2" / "config.json").write_text("{}")  # enough for the memory plan to read the size
    (tmp / "null.png").symlink_to("/dev/null")
    return tmp


def argv(case: Case, tmp: Path, port: int) -> list[str]:
    text = case.args.replace("{tmp}", str(tmp)).replace("{port}", str(port))
    # split as a shell would, but keep quotes inside a word (``vp_history="4"`` is the JSON text "4")
    return ["generate", *re.findall(r'(?:[^\s"]|"[^"]*")+', text), "--no-progress"]


def check(case: Case, code: int, output: str, tmp: Path) -> None:
    assert code == case.code, output
    assert case.says in output, output
    assert "Traceback" not in output and output.count("\n") <= 4, output
    assert "NFE" not in output and "wrote" not in output, output  # no image was made
    if case.writes:
        assert not Path(case.writes.replace("{tmp}", str(tmp))).exists()


def run_subprocess(args: list[str]) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(Path(__file__).parents[2] / "src"), os.environ.get("PYTHONPATH")])
        ),
    }
    return subprocess.run(
        [sys.executable, "-m", "jacobigen.cli", *args], capture_output=True, text=True, env=env, timeout=120
    )


@pytest.mark.parametrize("case", [c for c in CASES if c.early], ids=lambda c: c.what)
def test_refused_before_torch_in_a_subprocess(case, files):
    res = run_subprocess(argv(case, files, closed_port()))
    check(case, res.returncode, res.stdout + res.stderr, files)


@pytest.mark.parametrize("case", [c for c in CASES if not c.early], ids=lambda c: c.what)
def test_refused_in_process(case, files):
    res = CliRunner().invoke(main, argv(case, files, closed_port()))
    check(case, res.exit_code, res.output, files)


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in CASES if not c.early], ids=lambda c: c.what)
def test_refused_in_a_subprocess(case, files):
    res = run_subprocess(argv(case, files, closed_port()))
    check(case, res.returncode, res.stdout + res.stderr, files)


def test_at_least_thirty_bad_inputs_run_as_subprocesses():
    assert sum(c.early for c in CASES) >= 30


def table() -> str:
    """The table of bad inputs in docs/errors.md."""
    rows = ["| bad input | `jacobigen generate ...` | exit | the message says |", "|---|---|---|---|"]
    for c in CASES:
        args = c.args.replace("{tmp}/", "").replace("{tmp}", "DIR").replace("{port}", "PORT")
        args = args.encode("utf-8", "backslashreplace").decode()  # a byte that is not UTF-8, as \udcXX
        rows.append(f"| {c.what} | `{args}` | {c.code} | {c.says.replace('|', '/')} |")
    return "\n".join(rows)


def test_errors_page_lists_every_case():
    assert table() in ERRORS_PAGE.read_text(), (
        "docs/errors.md's bad-input table is stale: python tests/cli/test_bad_inputs.py"
    )


if __name__ == "__main__":
    print(table())


def test_a_reader_that_leaves_early_is_not_an_error():
    """`jacobigen plan ... | head -1`: the pipe closes while plan writes; no 'unexpected BrokenPipeError'."""
    import subprocess
    import sys

    cmd = f"{sys.executable} -m jacobigen.cli plan --shape all --table --quantize int8 | true"
    for _ in range(2):  # `true` leaves before plan writes a byte
        out = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, timeout=60)
        assert "unexpected" not in out.stderr and "Traceback" not in out.stderr, out.stderr
