"""The package's layers (docs/DESIGN.md §1), checked on the import graph read from the source.

Every module lives in a layer package, ``core`` < ``parts`` < ``decode`` < ``models`` < ``tools``
< ``serve`` < ``cli`` (the command line, last). A module imports only from its own layer or earlier ones,
at module level or inside a function; the package ``__init__`` (the lazy public names) is exempt.
Module-level imports form no cycle. The checker is tested on fabricated packages too, so a green run
means the rules hold, not that the checker saw nothing.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "jacobigen"
SRC = Path(__file__).resolve().parents[2] / "src"
LAYERS = ("core", "parts", "decode", "models", "tools", "serve", "cli")


@dataclass(frozen=True)
class Import:
    source: str  # importing module, dotted
    target: str  # imported module (or package), dotted
    module_level: bool  # runs when the source is imported (not in a function, not under TYPE_CHECKING)
    line: int


def modules(src: Path, package: str = PACKAGE) -> dict[str, Path]:
    """Dotted name -> file of every module under ``src/package`` (a package is its ``__init__``)."""
    out = {}
    for f in sorted((src / package).rglob("*.py")):
        parts = f.relative_to(src).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(body: list[ast.stmt], module_level: bool):
    """(import node, runs at import time) for every import in ``body``, nested ones included."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, module_level
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from _walk(node.body, False)
        elif isinstance(node, ast.If) and _type_checking(node.test):
            yield from _walk(node.body, False)
            yield from _walk(node.orelse, module_level)
        else:  # class bodies, if/try/with blocks: run when the module is imported
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    yield from _walk([n for n in inner if isinstance(n, ast.AST)], module_level)


def imports(src: Path, package: str = PACKAGE) -> list[Import]:
    """Every import of a module of ``package`` by a module of ``package``, resolved to a module:
    ``from .x import y`` is an import of ``x.y`` when that is a module, else of ``x``."""
    known = modules(src, package)
    out = []
    for name, path in known.items():
        is_package = path.name == "__init__.py"
        here = name.split(".") if is_package else name.split(".")[:-1]
        for node, module_level in _walk(ast.parse(path.read_text(), str(path)).body, True):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    if node.level - 1 > len(here) - 1:
                        raise ValueError(f"{path}:{node.lineno}: relative import beyond the package")
                    base = ".".join(here[: len(here) - (node.level - 1)] + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
            for t in dict.fromkeys(targets):
                if t == package or t.startswith(package + "."):
                    while t not in known and "." in t:  # `import jacobigen.x.attr`: the module
                        t = t.rsplit(".", 1)[0]
                    out.append(Import(name, t, module_level, node.lineno))
    return out


def layer(module: str, package: str = PACKAGE) -> int | None:
    """Rank of a module's layer in LAYERS; None for the package ``__init__`` (exempt as an importer,
    ranked last as an import: nothing inside the package should import it)."""
    if module == package:
        return None
    head = module.split(".")[1]
    if head not in LAYERS:
        raise ValueError(f"{module} is in no layer: put it in one of the packages {', '.join(LAYERS[:-1])}")
    return LAYERS.index(head)


def upward(edges: list[Import], package: str = PACKAGE) -> list[str]:
    """Imports from a later layer than the importer's, at module level or inside a function: none is allowed."""
    bad = []
    for e in edges:
        src = layer(e.source, package)
        dst = len(LAYERS) if e.target == package else layer(e.target, package)
        if src is not None and dst is not None and dst > src:
            bad.append(
                f"{e.source} (layer {LAYERS[src]}) imports {e.target} (layer "
                f"{LAYERS[dst] if dst < len(LAYERS) else 'the package __init__'}) at line {e.line}"
            )
    return bad


def cycles(edges: list[Import]) -> list[list[str]]:
    """Strongly connected components of the module-level import graph with more than one module
    (or a module importing itself), each sorted: every such component holds a cycle."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        if e.module_level:
            graph.setdefault(e.source, set()).add(e.target)
            graph.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:  # Tarjan's algorithm (the graph has ~60 nodes: recursion is fine)
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph[v]:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


# --- the package itself


def test_every_module_is_in_a_layer():
    for name in modules(SRC):
        layer(name)  # raises for a module outside the layer packages


def test_no_import_from_a_later_layer():
    edges = imports(SRC)
    assert len(edges) > 100, "the checker found too few imports to be reading the package"
    assert upward(edges) == []


def test_no_module_level_import_cycle():
    assert cycles(imports(SRC)) == []


def test_no_import_cycle_even_through_function_level_imports():
    """The structure check of issue 61: counting the imports inside functions too, no circle (the last
    one ran decode.api -> tools.auto -> tools.steps -> models.load -> models.bundle -> decode.api)."""
    every = [Import(e.source, e.target, True, e.line) for e in imports(SRC)]
    assert cycles(every) == []


def test_layers_match_the_design_map():
    """docs/DESIGN.md §1 names each layer package; the packages on disk are those."""
    on_disk = {p.name for p in (SRC / PACKAGE).iterdir() if (p / "__init__.py").is_file()}
    assert on_disk == set(LAYERS)
    design = (SRC.parent / "docs" / "DESIGN.md").read_text()
    for name in LAYERS:
        assert f"`{PACKAGE}/{name}/`" in design


# --- the checker can fail


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / PACKAGE / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_checker_finds_a_later_layer_import_and_a_cycle(tmp_path):
    src = _write(
        tmp_path,
        {
            "__init__.py": "from .tools import t  # the package __init__ may import anything\n",
            "cli.py": "from .tools.t import x\n",
            "core/__init__.py": "",
            "core/a.py": "from . import b\n\ndef f():\n    from ..decode.d import g   # later layer, in a function\n",
            "core/b.py": "import jacobigen.core.a\n",  # a <-> b at module level
            "decode/__init__.py": "",
            "decode/d.py": "from ..core.a import f\nfrom .. import cli\n",  # cli: later layer
            "tools/__init__.py": "",
            "tools/t.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..decode import d\n"
            "def h():\n    from ..core import a\nx = 1\n",
        },
    )
    edges = imports(src)
    assert {(e.source, e.target, e.module_level) for e in edges} == {
        ("jacobigen", "jacobigen.tools.t", True),
        ("jacobigen.cli", "jacobigen.tools.t", True),
        ("jacobigen.core.a", "jacobigen.core.b", True),
        ("jacobigen.core.a", "jacobigen.decode.d", False),
        ("jacobigen.core.b", "jacobigen.core.a", True),
        ("jacobigen.decode.d", "jacobigen.core.a", True),
        ("jacobigen.decode.d", "jacobigen.cli", True),
        ("jacobigen.tools.t", "jacobigen.decode.d", False),
        ("jacobigen.tools.t", "jacobigen.core.a", False),
    }
    bad = upward(edges)
    assert len(bad) == 2
    assert bad[0].startswith("jacobigen.core.a (layer core) imports jacobigen.decode.d (layer decode)")
    assert bad[1].startswith("jacobigen.decode.d (layer decode) imports jacobigen.cli (layer cli)")
    assert cycles(edges) == [["jacobigen.core.a", "jacobigen.core.b"]]


def test_checker_on_a_fabricated_graph():
    def e(a, b, top=True):
        return Import(f"{PACKAGE}.{a}", f"{PACKAGE}.{b}", top, 1)

    fine = [
        e("parts.p", "core.c"),
        e("decode.d", "parts.p"),
        e("tools.t", "models.m", False),
        e("cli", "tools.t"),
        e("core.c", "core.r"),
        e("core.r", "core.c", False),
    ]  # a function-level import back: no cycle
    assert upward(fine) == [] and cycles(fine) == []
    bad = fine + [
        e("core.c", "parts.p", False),
        e("models.m", "models.n"),
        e("models.n", "models.k"),
        e("models.k", "models.m"),
        e("core.r", "core.r"),
    ]
    assert upward(bad) == ["jacobigen.core.c (layer core) imports jacobigen.parts.p (layer parts) at line 1"]
    assert cycles(bad) == [["jacobigen.core.r"], ["jacobigen.models.k", "jacobigen.models.m", "jacobigen.models.n"]]
    assert upward([Import("jacobigen.core.c", "jacobigen", True, 3)]) == [
        "jacobigen.core.c (layer core) imports jacobigen (layer the package __init__) at line 3"
    ]


def test_an_upward_import_inside_a_function_is_refused_too():
    """No allow-list: ``auto``, the API's default, once imported ``tools`` from ``decode`` on call."""
    assert upward([Import("jacobigen.decode.api", "jacobigen.tools.auto", False, 1)]) == [
        "jacobigen.decode.api (layer decode) imports jacobigen.tools.auto (layer tools) at line 1"
    ]
