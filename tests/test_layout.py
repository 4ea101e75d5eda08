"""The package's shape: no import circle, no module doing two jobs, the static side free of the dynamic one.

Imports are read with `ast` (nothing is imported), at any depth: a function-level
import closes a circle as surely as a module-level one.  Imports under
`if TYPE_CHECKING:` are left out: they never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parent.parent / "kanalyze"
MAX_LINES = 420   # "about 400": a module past it is doing two jobs


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return modules


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imported(tree: ast.AST) -> list[str]:
    found: list[str] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
            found.extend(f"{node.module}.{alias.name}" for alias in node.names)
        stack.extend(ast.iter_child_nodes(node))
    return found


def import_graph() -> nx.DiGraph:
    modules = _modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        for target in _imported(ast.parse(path.read_text(encoding="utf-8"))):
            if target in modules and target != name:
                graph.add_edge(name, target)
    return graph


def test_no_import_circle() -> None:
    cycles = [" -> ".join(cycle + cycle[:1]) for cycle in nx.simple_cycles(import_graph())]
    assert not cycles, "import circles:\n" + "\n".join(sorted(cycles))


def test_the_walk_sees_function_level_imports() -> None:
    tree = ast.parse("def f():\n    from kanalyze.a import b\nif TYPE_CHECKING:\n    import kanalyze.c\n")
    assert _imported(tree) == ["kanalyze.a", "kanalyze.a.b"]


def test_no_module_over_about_400_lines() -> None:
    long = {str(path.relative_to(PACKAGE.parent)): n for path in PACKAGE.rglob("*.py")
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules doing two jobs: {long}"


def test_the_static_side_never_imports_the_dynamic_side() -> None:
    """The analyzer, the rules and the data model read code; only the pipeline (check/),
    the CLI and the editor tie them to the dynamic pass (DESIGN.md, Layout)."""
    graph = import_graph()
    readers = [n for n in graph if n.startswith(("kanalyze.analyzer", "kanalyze.rules"))
               or n in ("kanalyze.findings", "kanalyze.config")]
    crossing = sorted((n, t) for n in readers for t in graph.successors(n) if t.startswith("kanalyze.dynamic"))
    assert not crossing, crossing


def test_the_dynamic_side_never_imports_the_parsers() -> None:
    graph = import_graph()
    crossing = sorted((n, t) for n in graph if n.startswith("kanalyze.dynamic")
                      for t in graph.successors(n)
                      if t.startswith(("kanalyze.analyzer.triton", "kanalyze.analyzer.cuda", "kanalyze.analyzer.bounds",
                                       "kanalyze.rules")))
    assert not crossing, crossing
