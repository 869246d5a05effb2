"""The documentation stays true to the repository: the results pages are what docs/gen_results.py
makes from the committed benchmark JSON, that JSON ran from committed code no older than the last
change of tokens the changes page names, README stays an entry point, and its links resolve."""

import hashlib
import importlib.util
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
while not (ROOT / "pyproject.toml").exists():  # the test may sit in a subfolder of tests/
    ROOT = ROOT.parent


def gen_results():
    spec = importlib.util.spec_from_file_location("gen_results", ROOT / "docs" / "gen_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_results_page_is_generated_from_the_benchmark_json():
    gen = gen_results()
    assert (ROOT / "docs" / "results.md").read_text() == gen.render_results(), (
        "docs/results.md is stale: python docs/gen_results.py"
    )


def test_readme_headline_table_is_generated_from_the_benchmark_json():
    gen = gen_results()
    readme = (ROOT / "README.md").read_text()
    assert readme == gen.render_readme(readme), "README's headline table is stale: python docs/gen_results.py"


def test_every_template_table_exists():
    gen = gen_results()
    names = re.findall(r"^<!-- table: ([\w-]+) -->$", (ROOT / "docs" / "results.in.md").read_text(), re.M)
    assert names and set(names) <= set(gen.TABLES)


def test_readme_is_an_entry_point():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def test_readme_links_resolve():
    readme = (ROOT / "README.md").read_text()
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme):
        if "://" not in target:
            assert (ROOT / target).exists(), f"README links to {target}, which does not exist"


# --- exactness is tested, not proved --------------------------------------------------------

PROVE = re.compile(r"\b(prove[sdn]?|proving|proofs?)\b", re.I)
ABOUT_EXACTNESS = re.compile(r"exact|lossless|\btests?\b|suite|G-test|sampl", re.I)


def says_prove_about_exactness(text: str) -> list[str]:
    """The sentences of a page that say a test or the suite proves (or is a proof of) exactness:
    the exactness tests are G-tests, which bound a bias but prove nothing."""
    sentences = re.split(r"(?<=[.!?:])\s+|\n\s*\n|\n(?=#|\||- )", text)
    return [" ".join(s.split()) for s in sentences if PROVE.search(s) and ABOUT_EXACTNESS.search(s)]


@pytest.mark.parametrize(
    "text, flagged",
    [
        ("A test suite that proves each lossless\ncombination samples exactly the AR law.", True),
        ("## 6. How the tests prove it", True),
        ("The G-test is our proof that `sjd` is exact.", True),
        ("A test suite that tests each lossless combination for exactness.", False),
        ("Provenance. The JSON records the git commit.", False),
        ("A probe file that proves permission.\n\nThe exact verifier keeps the law.", False),
    ],
)
def test_the_prove_check_finds_statistical_claims(text, flagged):
    assert bool(says_prove_about_exactness(text)) == flagged


def test_no_page_says_the_tests_prove_exactness():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = [f"{p.relative_to(ROOT)}: {s}" for p in pages for s in says_prove_about_exactness(p.read_text())]
    assert not found, "the exactness tests are statistical (docs/exactness.md): say tests, not proves:\n" + "\n".join(
        found
    )


# --- results that match the code --------------------------------------------------------------

TOKEN_CHANGE = re.compile(r"\(commit `([0-9a-f]{7,40})`(, `ar`'s tokens only)?\)")
# a result that compares a method's images with ar's own (a FID against ar): what an ar-only change moves
AR_IMAGES = "fid_vs_ar"


def compares_with_ar(data) -> bool:
    """Whether a result holds a figure measured against ``ar``'s images (a non-null :data:`AR_IMAGES`)."""
    if isinstance(data, dict):
        return data.get(AR_IMAGES) is not None or any(compares_with_ar(v) for v in data.values())
    return isinstance(data, list) and any(compares_with_ar(v) for v in data)


def token_changes(page: str) -> list[str]:
    """The commits that changed tokens for a seed: the changes page marks each as (commit `abc1234`)."""
    return [c for c, _ in TOKEN_CHANGE.findall(page)]


def ar_only_changes(page: str) -> set[str]:
    """Those that changed ``ar``'s tokens alone, marked (commit `abc1234`, `ar`'s tokens only): every
    other method's tokens, every forward count and time stay, so only results that compare with
    ``ar``'s images (:data:`AR_IMAGES`) and pictures drawn by ``ar`` must run after them."""
    return {c for c, scope in TOKEN_CHANGE.findall(page) if scope}


def provenance(data) -> Iterator[dict]:
    """Each record of a result file that names the commit it ran from (one per setting of a bench)."""
    if isinstance(data, dict):
        if "git_commit" in data:
            yield data
        for value in data.values():
            yield from provenance(value)
    elif isinstance(data, list):
        for value in data:
            yield from provenance(value)


def descends(repo: Path, ancestor: str, commit: str) -> bool:
    run = subprocess.run(
        ["git", "-C", str(repo), "merge-base", "--is-ancestor", ancestor, commit], capture_output=True, text=True
    )
    if run.returncode > 1:
        raise AssertionError(f"git cannot compare {ancestor} and {commit} (a shallow clone?): {run.stderr.strip()}")
    return run.returncode == 0


def stale_results(repo: Path, results: Path, changes: list[str], ar_only: set[str] = frozenset()) -> list[str]:
    """Why each result file under ``results`` may not describe the code: run from uncommitted or
    unknown code, or from a commit before one of ``changes`` (one of ``ar_only`` only where the file
    compares with ``ar``'s images)."""
    problems = []
    for path in sorted(results.rglob("*.json")):
        name, data = path.relative_to(results), json.loads(path.read_text())
        moved = [c for c in changes if c not in ar_only or compares_with_ar(data)]
        for record in provenance(data):
            problems += stale_record(repo, name, record, moved)
    return list(dict.fromkeys(problems))  # a bench's settings repeat its commit


def stale_record(repo: Path, name, record: dict, changes: list[str]) -> list[str]:
    """Why one record (``git_commit``, ``git_dirty``) may not describe the code, if it may not."""
    commit = record["git_commit"]
    if commit is None:
        return [f"{name}: ran outside a git checkout, so its code is unknown"]
    problems = (
        [f"{name}: ran from {commit[:7]} with uncommitted changes"] if record.get("git_dirty") is not False else []
    )
    return problems + [
        f"{name}: ran from {commit[:7]}, before {c}, which changed tokens"
        for c in changes
        if not descends(repo, c, commit)
    ]


def test_the_changes_page_names_the_commits_that_changed_tokens():
    changes = token_changes((ROOT / "docs" / "changes.md").read_text())
    assert "80710e0" in changes, "the id-span targets (issue 49) changed tokens"
    for commit in changes:
        assert descends(ROOT, commit, "HEAD"), f"docs/changes.md names {commit}, which is not in this history"


def test_committed_results_ran_from_the_code_they_describe():
    if not (ROOT / ".git").exists():
        pytest.fail("the results check needs the git history: run the tests from a clone")
    page = (ROOT / "docs" / "changes.md").read_text()
    problems = stale_results(ROOT, ROOT / "benchmarks", token_changes(page), ar_only_changes(page))
    assert not problems, "stale benchmark JSON (rerun its command, see benchmarks/README.md):\n" + "\n".join(problems)


@pytest.mark.parametrize("grid, model", [("samples.png", "emoji"), ("names/samples.png", "emoji-names")])
def test_the_samples_grid_ran_from_the_code_that_makes_its_tokens(grid, model):
    """samples.png, the first picture a user sees (and the emoji-names model's), is remade by its README
    command after every change of tokens: its PNG record (``jacobigen generate --out``) names the
    commit and the model that drew it."""
    from PIL import Image

    path = ROOT / "src" / "jacobigen" / "weights" / grid
    record = json.loads(Image.open(path).text.get("jacobigen", '{"git_commit": null}'))
    assert record.get("model") == model, f"{grid} was drawn by {record.get('model')!r}, not {model!r}"
    page = (ROOT / "docs" / "changes.md").read_text()
    changes = [c for c in token_changes(page) if c not in ar_only_changes(page) or record.get("method") == "ar"]
    problems = stale_record(ROOT, grid, record, changes)
    assert not problems, f"remake {grid} with the README's command:\n" + "\n".join(problems)


# model name -> folder under weights/
SHIPPED = {"emoji": "", "emoji-names": "names", "emoji-video": "video", "emoji-names-video": "names-video"}


def stale_weights(results: Path) -> list[str]:
    """Records of a shipped model that ran other weights than it ships now (a retrained model, or
    a name moved to other weights): their figures describe a model that is gone."""
    from jacobigen.models.load import WEIGHTS, own_or_shipped

    problems = []
    for path in sorted(results.rglob("*.json")):
        for record in provenance(json.loads(path.read_text())):
            folder, hashes = SHIPPED.get(record.get("model")), record.get("weights")
            if folder is None or not isinstance(hashes, dict):
                continue
            for name, digest in hashes.items():
                now = hashlib.sha256(own_or_shipped(WEIGHTS / folder, name).read_bytes()).hexdigest()
                if now != digest:
                    ran = f"{record['model']}'s {name} {digest[:12]}"
                    problems.append(f"{path.relative_to(results)}: ran {ran}, not {now[:12]}")
    return list(dict.fromkeys(problems))


def test_committed_results_ran_the_weights_their_model_ships():
    problems = stale_weights(ROOT / "benchmarks")
    assert not problems, "benchmark JSON of replaced weights (rerun its command):\n" + "\n".join(problems)


def test_the_weights_check_sees_a_retrained_model(tmp_path):
    from jacobigen.models.load import weights_provenance

    shipped = weights_provenance("emoji-names")
    record = {"git_commit": "abc", "model": "emoji-names", "weights": shipped}
    (tmp_path / "now.json").write_text(json.dumps(record))
    (tmp_path / "before.json").write_text(json.dumps({**record, "weights": {**shipped, "ar.safetensors": "0" * 64}}))
    want = f"before.json: ran emoji-names's ar.safetensors {'0' * 12}, not {shipped['ar.safetensors'][:12]}"
    assert stale_weights(tmp_path) == [want]


# Result files that name no commit, so the check above cannot see them: each stays for the reason given,
# and the page that cites it says how old it is. A new file must carry git_commit or be listed here.
UNCHECKED = {
    **{
        f"gpu/{name}.json": "a lent H200 ran an uncommitted copy of the tree (meta.git names a dirty commit, the "
        "embedded bench none), before 80710e0; docs/results.md dates these runs and says they await a rerun"
        for name in ("h200/measure", "h200/window64/measure", "h200/embedded/bench", "h200-step/measure")
    },
    "gpu/h200-step/compiled.json": "the same H200 session as h200-step/measure.json (efe72c7, dirty), before 80710e0",
    "ray/images/stats.json": "generate --ray's stats.json, which records no commit; committed in 1be38f1 "
    "(2026-12-02), before 80710e0: docs/results.md dates the run",
    "ray/local/stats.json": "the same run's one-process half (1be38f1, 2026-12-02), before 80710e0",
    "serve/batching.json": "benchmarks/serve/batching.py records no commit; from e926ca0, before 80710e0: "
    "docs/serving.md marks its 4.54x stale",
    "serve/bench.json": "benchmarks/serve/bench.py records no commit; from e926ca0 (2026-12-06), before 80710e0",
    "serve/bench-uncalibrated.json": "the same bench as serve/bench.json, uncalibrated; e926ca0, before 80710e0",
    "serve/load.json": "benchmarks/serve/load.py records no commit; from 1eecef0 (2026-12-05), before 80710e0; "
    "what it checks (served images equal offline ones) does not depend on the tokens",
    "video-emoji/models.json": "training-data and held-out-loss figures of the clip models, written by hand "
    "from make_clips.py and train_video.py: no decoding, so no tokens to go stale",
}


def committed_results(repo: Path) -> list[str]:
    """The JSON under benchmarks/ that git tracks, relative to benchmarks/."""
    ls = ["git", "-C", str(repo), "ls-files", "-z", "--", "benchmarks/*.json"]  # * crosses folders in a pathspec
    out = subprocess.run(ls, capture_output=True, text=True, check=True).stdout
    return sorted(str(Path(p).relative_to("benchmarks")) for p in out.split("\0") if p)


def unchecked_results(results: Path, names: list[str]) -> set[str]:
    """Those of ``names`` (under ``results``) with no record that names a commit: invisible to stale_results."""
    return {n for n in names if not any(provenance(json.loads((results / n).read_text())))}


def test_every_benchmark_json_is_checked_or_exempt():
    if not (ROOT / ".git").exists():
        pytest.fail("the results check needs the git history: run the tests from a clone")
    unchecked = unchecked_results(ROOT / "benchmarks", committed_results(ROOT))
    new = sorted(unchecked - set(UNCHECKED))
    assert not new, f"benchmark JSON without git_commit: record the commit, or list it in UNCHECKED with why: {new}"
    assert not set(UNCHECKED) - unchecked, "UNCHECKED lists files that are gone or now carry git_commit"


def test_the_exemption_check_sees_a_new_file_without_a_commit(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "bench.json").write_text(json.dumps({"rows": [{"nfe": 3}]}))
    (tmp_path / "fresh.json").write_text(json.dumps({"settings": {"a": {"git_commit": "abc", "git_dirty": False}}}))
    assert unchecked_results(tmp_path, ["run/bench.json", "fresh.json"]) == {"run/bench.json"}


@pytest.mark.parametrize(
    "record, complaint",
    [
        ({"git_commit": None, "git_dirty": None}, "outside a git checkout"),
        ({"git_commit": "HEAD", "git_dirty": True}, "uncommitted changes"),
        ({"git_commit": "80710e0^", "git_dirty": False}, "before 80710e0"),
        ({"settings": {"threads-2": {"git_commit": "80710e0^", "git_dirty": False}}}, "before 80710e0"),
    ],
)
def test_the_results_check_refuses_stale_json(record, complaint, tmp_path):
    for r in provenance(record):
        if r["git_commit"]:
            r["git_commit"] = subprocess.run(
                ["git", "-C", str(ROOT), "rev-parse", r["git_commit"]], capture_output=True, text=True, check=True
            ).stdout.strip()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "bench.json").write_text(json.dumps(record))
    (tmp_path / "fresh.json").write_text(json.dumps({"git_commit": "HEAD", "git_dirty": False}))
    problems = stale_results(ROOT, tmp_path, ["80710e0"])
    assert len(problems) == 1 and problems[0].startswith("run/bench.json") and complaint in problems[0], problems


def test_a_change_of_ars_tokens_only_stales_the_results_that_compare_with_ars_images(tmp_path):
    old = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "80710e0^"], capture_output=True, text=True, check=True
    ).stdout.strip()
    speed = {"git_commit": old, "git_dirty": False, "rows": [{"nfe": 3, "fid_vs_ar": None}]}
    (tmp_path / "speed.json").write_text(json.dumps(speed))
    (tmp_path / "fid.json").write_text(json.dumps({"git_commit": old, "git_dirty": False, "rows": [{"fid_vs_ar": 9}]}))
    assert [p.split(":")[0] for p in stale_results(ROOT, tmp_path, ["80710e0"], {"80710e0"})] == ["fid.json"]
    assert len(stale_results(ROOT, tmp_path, ["80710e0"])) == 2
    page = "a (commit `1234567`) and b (commit `89abcde`, `ar`'s tokens only)"
    assert token_changes(page) == ["1234567", "89abcde"] and ar_only_changes(page) == {"89abcde"}


# --- what the exactness tests can see ---------------------------------------------------------

POWER_ROW = re.compile(r"^\| ([^|]+?) \| [^|]+ \| (\d+) \| (\d+) \| ([\d.]+)% \| ([\d.]+) \| ([\d.]+) \|$", re.M)


def exactness_references() -> dict:
    """Each reference distribution the exactness tests compare samples with, named as
    docs/exactness.md names it: (model, layout, sampling, prompt)."""
    from jacobigen.core.layout import ImageLayout
    from jacobigen.core.sampling import SamplingConfig
    from jacobigen.tools.exactness import PROMPT, layout, tiny_model, video_layout

    plain, guided, topk = (
        SamplingConfig(),
        SamplingConfig(cfg=2.0, top_p=0.95, temperature=0.9),
        SamplingConfig(top_k=2, cfg=1.5),
    )
    tiny, sharp, clip, sharp_clip = (
        tiny_model(),
        tiny_model(sharpness=3.0),
        tiny_model(vocab=9),
        tiny_model(vocab=9, sharpness=3.0),
    )
    wide, shifted = tiny_model(vocab=10), ImageLayout(2, 3, (3, 6), eol_id=6, end_id=7)  # test_exactness' `shifted`
    return {
        "2x3 image, plain": (tiny, layout(True), plain, PROMPT),
        "2x3 image, guided": (tiny, layout(True), guided, PROMPT),
        "2x3 image, top-k": (tiny, layout(True), topk, PROMPT),
        "2x3 image, plain, sharper model": (sharp, layout(True), plain, PROMPT),
        "2x3 image, plain, prompt [1, 2, 5, 6, 2]": (tiny, layout(True), plain, [1, 2, 5, 6, 2]),
        "2x3 image without line ends, plain": (tiny, layout(False), plain, PROMPT),
        "2x3 image without line ends, guided": (tiny, layout(False), guided, PROMPT),
        "2x3 image, ids from 3, plain": (wide, shifted, plain, PROMPT),
        "2x3 image, ids from 3, top-k": (wide, shifted, topk, PROMPT),
        "3x2 image, guided": (tiny, layout(True, 3, 2), guided, PROMPT),
        "3x2 image without line ends, plain": (tiny, layout(False, 3, 2), plain, PROMPT),
        "1x3 clip of 2 frames, plain": (clip, video_layout(), plain, PROMPT),
        "1x3 clip of 2 frames, guided": (clip, video_layout(), guided, PROMPT),
        "1x3 clip of 2 frames, plain, sharper model": (sharp_clip, video_layout(), plain, PROMPT),
        "2x2 clip of 2 frames, plain": (clip, video_layout(2, 2, 2), plain, PROMPT),
    }


def test_the_exactness_page_states_the_bias_each_test_can_see():
    """docs/exactness.md's power table is what tools.exactness computes for the tests' N and threshold."""
    from jacobigen.tools.exactness import detectable_tv, exact_distribution, gof_cells

    n = 20_000
    rows = {m[0]: m[1:] for m in POWER_ROW.findall((ROOT / "docs" / "exactness.md").read_text())}
    references = exactness_references()
    assert set(rows) == set(references), "docs/exactness.md's power table names other references than the tests use"
    for name, (model, lay, sampling, prompt) in references.items():
        exact = exact_distribution(model, lay, sampling, prompt)
        probs = exact.probs / exact.probs.sum()
        cells = gof_cells(exact, n)
        computed = (
            str(int((probs > 0).sum())),
            str(cells),
            f"{100 * probs[probs * n < 5].sum():.1f}",
            f"{detectable_tv(cells, n):.3f}",
            f"{detectable_tv(cells, n, power=0.5):.3f}",
        )
        assert rows[name] == computed, f"docs/exactness.md, {name}: {rows[name]} != computed {computed}"
