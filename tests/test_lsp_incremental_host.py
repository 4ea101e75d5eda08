"""The editor's incremental analysis of files with host code gives exactly what a
whole analysis gives.

layout.py cuts a document with wrappers, classes and launches into pieces (the
context and one component of units each) and incremental.py re-analyzes only
the pieces an edit changed.  The oracle is `analyze_document` on the same text:
the findings (codes, rows, columns, messages, statuses, evidence, in order) and
the `# noqa` count must be equal.  It is asked of every Python file under
fixtures/ and of a seeded sample of the ecosystem projects' files (when
`bench/ecosystem.py` has fetched them), as written and after seeded random
edits: a line inserted in a kernel, a variable renamed, a `tl.dot`'s precision
flipped, a wrapper edited.  One analyzer serves each file's session, as the
server's worker does, so what it kept from earlier versions is tested too.

The proof settings are the server's default (`proofs: False`: MEM003 and MEM004
are not selected); with the proofs on, a text that launches is analyzed whole.
"""

from __future__ import annotations

import ast
import os
import random
import re
from pathlib import Path

import pytest

from kanalyze.lsp.analysis import analyze_document
from kanalyze.lsp.incremental import IncrementalAnalyzer
from kanalyze.lsp.layout import Layout, cut

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted((ROOT / "fixtures").rglob("*.py"))
ECOSYSTEM = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kanalyze" / "ecosystem"
PROOFS_OFF = {"proofs": False}
EDITS_PER_FILE = 3


def same_as_whole(analyzer: IncrementalAnalyzer, path: str, text: str, proofs: dict | None = PROOFS_OFF) -> list:
    """Assert that the analyzer gives what a whole analysis of `text` gives; the findings."""
    findings, suppressed = analyze_document(path, text, "python", proofs)
    got, got_suppressed = analyzer.analyze(path, text, "python", proofs)
    assert [f.to_dict() for f in got] == [f.to_dict() for f in findings]
    assert got_suppressed == suppressed
    return findings


def session(path: str, text: str, seed: int, edits: int = EDITS_PER_FILE) -> int:
    """The text, then `edits` seeded edits of it, each compared with the whole analysis
    wherever the layout cuts it (a text left whole is analyzed whole: nothing to compare).
    How many texts were cut."""
    rng = random.Random(seed)
    analyzer = IncrementalAnalyzer()
    cuts = 0
    for step in range(edits + 1):
        if step:
            before, text = text, edit(rng, text)
            # Cut from the last version's layout (only the changed lines parsed), as from nothing.
            previous = cut(before)
            assert cut(text, previous if isinstance(previous, Layout) else None) == cut(text)
        if isinstance(cut(text), Layout):
            cuts += 1
            same_as_whole(analyzer, path, text)
    return cuts


# --- seeded edits ----------------------------------------------------------------------

def top_functions(tree: ast.Module) -> tuple[list, list]:
    """(jit kernels, host functions and methods), as ast nodes."""
    kernels, host = [], []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in node.decorator_list):
            kernels.append(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            host.append(node)
        elif isinstance(node, ast.ClassDef):
            host += [n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return kernels, host


def statement_starts(function: ast.AST) -> list[ast.stmt]:
    """The statements of a function's body at any depth, not in nested functions or classes."""
    found, stack = [], list(function.body)
    while stack:
        node = stack.pop()
        found.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stack += [c for c in ast.iter_child_nodes(node) if isinstance(c, ast.stmt)]
    return sorted(found, key=lambda n: n.lineno)


def insert_before(text: str, statement: ast.stmt, line: str) -> str:
    lines = text.splitlines(keepends=True)
    lines.insert(statement.lineno - 1, " " * statement.col_offset + line + "\n")
    return "".join(lines)


def insert_in_kernel(rng: random.Random, text: str, tree: ast.Module) -> str | None:
    kernels, _ = top_functions(tree)
    if not kernels:
        return None
    statement = rng.choice(statement_starts(rng.choice(kernels)))
    line = rng.choice(["edit_tmp = 0", "edit_tmp = tl.program_id(0) * 2", "# a comment inserted",
                       "edit_scale = 1.0  # noqa: PRC001"])
    return insert_before(text, statement, line)


def rename_variable(rng: random.Random, text: str, tree: ast.Module) -> str | None:
    kernels, host = top_functions(tree)
    functions = kernels + host
    if not functions:
        return None
    function = rng.choice(functions)
    stored = sorted({n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)})
    if not stored:
        return None
    name = rng.choice(stored)
    lines = text.splitlines(keepends=True)
    first = min([function.lineno] + [d.lineno for d in function.decorator_list]) - 1
    for row in range(first, function.end_lineno):
        lines[row] = re.sub(rf"\b{re.escape(name)}\b", f"{name}_renamed", lines[row])
    return "".join(lines)


def flip_dot(rng: random.Random, text: str, tree: ast.Module) -> str | None:
    dots = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func).endswith("dot")
            and n.end_lineno == n.lineno]
    if not dots:
        return None
    call = rng.choice(dots)
    lines = text.splitlines(keepends=True)
    line = lines[call.lineno - 1]
    source = line[call.col_offset:call.end_col_offset]
    if "input_precision" in source:
        new = re.sub(r"""input_precision\s*=\s*("[^"]*"|'[^']*'|\w+)""",
                     rng.choice(['input_precision="tf32"', 'input_precision="ieee"']), source, count=1)
    elif "allow_tf32" in source:
        new = re.sub(r"allow_tf32\s*=\s*\w+", rng.choice(["allow_tf32=True", "allow_tf32=False"]), source, count=1)
    else:
        new = source[:-1].rstrip() + (", " if call.args or call.keywords else "") + \
            rng.choice(['input_precision="ieee"', 'input_precision="tf32"', "allow_tf32=True"]) + ")"
    lines[call.lineno - 1] = line[:call.col_offset] + new + line[call.end_col_offset:]
    return "".join(lines)


def edit_wrapper(rng: random.Random, text: str, tree: ast.Module) -> str | None:
    _, host = top_functions(tree)
    if not host:
        return None
    function = rng.choice(host)
    statements = statement_starts(function)
    if not statements:
        return None
    statement = rng.choice(statements)
    params = [a.arg for a in function.args.args if a.arg not in ("self", "cls", "ctx")] or ["None"]
    kind = rng.choice(["insert", "insert", "cdiv", "literal", "delete"])
    if kind == "cdiv" and "triton.cdiv(" in ast.get_source_segment(text, function):
        lines = text.splitlines(keepends=True)
        for row in range(function.lineno - 1, function.end_lineno):
            changed = re.sub(r"triton\.cdiv\(([^(),]+),\s*([^(),]+)\)", r"(\1 // \2)", lines[row], count=1)
            if changed != lines[row]:
                lines[row] = changed
                return "".join(lines)
    if kind == "literal":
        lines = text.splitlines(keepends=True)
        row = statement.lineno - 1
        changed = re.sub(r"\b(\d+)\b", lambda m: str(int(m.group(1)) * 2 + 1), lines[row], count=1)
        if changed != lines[row]:
            lines[row] = changed
            return "".join(lines)
    if kind == "delete" and statement.end_lineno == statement.lineno and len(statements) > 1 \
            and not isinstance(statement, (ast.Return, ast.If, ast.For, ast.While, ast.With, ast.Try)):
        lines = text.splitlines(keepends=True)
        indent = " " * statement.col_offset
        lines[statement.lineno - 1] = indent + "pass\n"
        return "".join(lines)
    tensor = rng.choice(params)
    line = rng.choice([f"edit_out = torch.empty_like({tensor})",
                       f"edit_sum = torch.sum({tensor})",
                       f"assert {tensor}.shape[0] == 3",
                       f"edit_host = {tensor}.cpu()",
                       "torch.backends.cuda.matmul.allow_tf32 = True",
                       f"edit_half = {tensor}.half()"])
    return insert_before(text, statement, line)


EDITS = [insert_in_kernel, rename_variable, flip_dot, edit_wrapper]


def edit(rng: random.Random, text: str) -> str:
    """One seeded edit that keeps the text parsing (or the text itself, when none applies)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    for kind in rng.sample(EDITS, len(EDITS)):
        new = kind(rng, text, tree)
        if new is None or new == text:
            continue
        try:
            ast.parse(new)
        except SyntaxError:
            continue
        return new
    return text


# --- fixtures and ecosystem files --------------------------------------------------------

@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: str(p.relative_to(ROOT / "fixtures")))
def test_every_fixture_as_written_and_edited(path: Path) -> None:
    text = path.read_text(encoding="utf-8", errors="surrogateescape")
    session(f"/workspace/{path.name}", text, seed=sum(map(ord, path.name)))


def test_the_fixtures_with_host_code_are_cut() -> None:
    """Host code no longer leaves a fixture whole: a good share of them are cut, wrappers,
    classes and launches included (the test above compares only those)."""
    texts = [p.read_text(encoding="utf-8", errors="surrogateescape") for p in FIXTURES]
    cut_texts = [text for text in texts if isinstance(cut(text), Layout)]
    launching = [text for text in cut_texts if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)
                                                   for n in ast.walk(ast.parse(text)))]
    with_host = [text for text in launching if top_functions(ast.parse(text))[1]]
    assert len(cut_texts) >= 20 and len(with_host) >= 10


@pytest.mark.slow
def test_a_sample_of_ecosystem_files_as_written_and_edited() -> None:
    if not ECOSYSTEM.is_dir():
        pytest.skip(f"no ecosystem cache at {ECOSYSTEM} (python bench/ecosystem.py fetches it)")
    files = sorted(ECOSYSTEM.rglob("*.py"))
    rng = random.Random(14)
    rng.shuffle(files)
    tried = checked = cut_texts = 0
    for path in files[:600]:
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        tried += 1
        if not isinstance(cut(text), Layout):
            continue
        cut_texts += session(str(path), text, seed=checked)
        checked += 1
        if checked == 10:
            break
    assert checked == 10, f"only {checked} of {tried} sampled ecosystem files are cut"
    assert cut_texts >= 20
