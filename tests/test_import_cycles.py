"""No import cycle in ``src/genembed``: imports flow one way (STYLE.md, "Folders follow the pipeline").

The graph counts every import statement: at module level, inside a function (a function-level import
only delays a cycle, it does not remove it) and under ``if TYPE_CHECKING:`` (such an import never runs,
but it still ties the module to one above it: a reader, a type checker and a refactoring all follow it;
an annotation that needs a class from above names a ``Protocol`` of its own instead). An edge goes to
the module imported: ``from .store import X`` is an edge to ``genembed.retrieval.store``, ``from . import
x`` to ``genembed.<pkg>.x`` when that is a module. Run it as a script to print the cycles::

    python tests/test_import_cycles.py
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def module_names(src: Path, package: str) -> dict[str, Path]:
    """Every module of ``package`` under ``src``: dotted name -> file (a package is its ``__init__``)."""
    names = {}
    for file in sorted((src / package).rglob("*.py")):
        parts = list(file.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = file
    return names


def import_graph(src: Path, package: str) -> dict[str, set[str]]:
    """``module -> the modules of package it imports``, from the source alone (nothing is imported)."""
    modules = module_names(src, package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, file in modules.items():
        is_package = file.name == "__init__.py"
        here = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(file.read_text("utf-8"), str(file))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names
                ]
            for target in targets:
                while target and target not in modules:  # `import genembed.a.b` names a module or a package
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
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
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph)))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(found)


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, "utf-8")


def test_the_checker_finds_cycles_through_function_level_typing_only_and_relative_imports(tmp_path):
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from .b import f\n",
            "pkg/b.py": "def f():\n    from .sub import c\n",  # function-level, through a subpackage
            "pkg/sub/__init__.py": "",
            "pkg/sub/c.py": "from .. import a\n",
            "pkg/d.py": "import pkg.a\nfrom pkg.sub.c import x\n",  # imports into the cycle, not part of it
            "pkg/e.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .d import x\n",
        },
    )
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.d"] == {"pkg.a", "pkg.sub.c"} and graph["pkg.e"] == {"pkg.d"}
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.sub.c"]]
    _write(tmp_path, {"pkg/b.py": "def f():\n    pass\n"})
    assert cycles(import_graph(tmp_path, "pkg")) == []
    # one direction typing-only is still a cycle
    _write(
        tmp_path,
        {
            "pkg/f.py": "from .e import y\n",
            "pkg/d.py": "import typing\nif typing.TYPE_CHECKING:\n    from .f import z\n",
        },
    )
    assert cycles(import_graph(tmp_path, "pkg")) == [["pkg.d", "pkg.e", "pkg.f"]]


def test_genembed_has_no_import_cycle():
    graph = import_graph(SRC, "genembed")
    assert "genembed.retrieval.stores" in graph and len(graph) > 50  # the whole package was read
    assert cycles(graph) == []


if __name__ == "__main__":
    for cycle in cycles(import_graph(SRC, "genembed")):
        print(" <-> ".join(cycle))
