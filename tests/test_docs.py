"""The documentation stays true to the repository: the results pages are what docs/gen_results.py
makes from the committed benchmark JSON, README stays an entry point, and its links resolve."""

import importlib.util
import re
from pathlib import Path

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
