"""The project index (kanalyze/analyzer/project_index.py): a kernel defined in one checked
module and launched, or handed on, from another is not reported as never launched.

The fixture package fixtures/triton/cross_module/ is checked here as a tree; the
fixture test (test_fixtures.py) checks each of its files alone, as the editor does.
Its `# tree ok:` / `# tree expect:` lines say what the tree check gives where it
differs from the file alone.  The per-file guarantees hold with the index: the
cache is keyed by what the index told a file, findings are the same run to run and
with or without the pool, a file the index cannot read costs only itself.
"""

from __future__ import annotations

import hashlib
import json
import re
import textwrap
from pathlib import Path

import pytest

from expectations import parse_expectations
from kanalyze import cache as cache_module
from kanalyze.analyzer.module_imports import summarize
from kanalyze.analyzer.project_index import Linked, ProjectIndex, kernel_candidates
from kanalyze.check import run_static
from kanalyze.config import load_config

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "fixtures" / "triton" / "cross_module"
TREE_DIRECTIVE = re.compile(r"^(\s*#\s*)tree\s+(expect|ok):")
PLAIN_DIRECTIVE = re.compile(r"^\s*#\s*(expect|ok):")


def tree_expectations(text: str) -> tuple[set, set]:
    """(expected, forbidden) for the tree check: a file's own expectations, where a
    `# tree expect:` / `# tree ok:` line replaces them for its codes on its target line."""
    expected, forbidden = parse_expectations(text)
    lines = text.splitlines()
    # Only the tree directives, as plain ones (the others blanked: blank lines keep the targets).
    tree_only = "\n".join(TREE_DIRECTIVE.sub(r"\1\2:", line) if TREE_DIRECTIVE.match(line)
                          else "" if PLAIN_DIRECTIVE.match(line) else line for line in lines)
    tree_expected, tree_forbidden = parse_expectations(tree_only)
    overridden = tree_expected | tree_forbidden
    return (expected - overridden) | tree_expected, (forbidden - overridden) | tree_forbidden


def by_row(findings, path: Path) -> dict[tuple[int, str], str]:
    return {(f.location.row, f.code): f.message for f in findings if Path(f.location.file).resolve() == path}


def config_for(path: Path):
    return load_config([str(path)], isolated=True, select=["ALL"])


def linked_in(files: dict[str, str], tmp_path: Path, module: str = "pkg/kern.py"):
    """`files` (path under tmp_path → source, dedented) written and indexed as one check: what
    the index hands `module` (its `Linked`)."""
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    index = ProjectIndex.build({str(tmp_path / n): (tmp_path / n).read_text() for n in files})
    return index.linked(str(tmp_path / module))


def check_tree(package: Path):
    """The package checked as a tree, each file's findings held to its tree expectations (every
    expected one fires, no other does); (the result, how many expectations were checked)."""
    result = run_static([str(package)], config_for(package), use_cache=False, jobs=1)
    checked = 0
    for path in sorted(package.rglob("*.py")):
        expected, forbidden = tree_expectations(path.read_text(encoding="utf-8"))
        found = by_row(result.findings, path)
        assert not expected - found.keys(), f"{path.name}: expected, did not fire: {sorted(expected - found.keys())}"
        assert not forbidden & found.keys(), f"{path.name}: fired: {[(k, found[k]) for k in forbidden & found.keys()]}"
        assert not found.keys() - expected, f"{path.name}: unexpected: {[(k, found[k]) for k in found.keys() - expected]}"
        checked += len(expected | forbidden)
    return result, checked


# --------------------------------------------------------------- the fixture package

def test_the_package_checked_as_a_tree_meets_its_tree_expectations() -> None:
    result, checked = check_tree(PACKAGE)
    assert checked >= 8


def test_the_tree_differs_from_the_file_alone_where_the_fixture_says() -> None:
    """The tree directives are not vacuous: the same file checked alone reports those kernels."""
    kernels = PACKAGE / "kernels.py"
    text = kernels.read_text(encoding="utf-8")
    alone = by_row(run_static([str(kernels)], config_for(kernels), use_cache=False, jobs=1).findings, kernels)
    tree = by_row(run_static([str(PACKAGE)], config_for(PACKAGE), use_cache=False, jobs=1).findings, kernels)
    launched_elsewhere = {key for key in tree_expectations(text)[1] if key not in parse_expectations(text)[1]}
    assert {name for name in ("add_kernel", "mul_kernel", "relu_kernel", "neg_kernel", "gelu_kernel")
            if any(f"`{name}` is never launched" in alone[k] for k in launched_elsewhere)} == \
        {"add_kernel", "mul_kernel", "relu_kernel", "neg_kernel", "gelu_kernel"}
    assert not launched_elsewhere & tree.keys()
    # What stays reported says so for the whole check; alone, for the file.
    assert all("from this file's forward path or from another checked module;" in m
               for (row, code), m in tree.items() if code == "RES001")
    assert all("from this file's forward path;" in m for (row, code), m in alone.items() if code == "RES001")


def test_what_the_index_links_in_the_package() -> None:
    files = {str(p): p.read_text(encoding="utf-8") for p in sorted(PACKAGE.rglob("*.py"))}
    linked = ProjectIndex.build(files).linked(str(PACKAGE / "kernels.py"))
    assert linked == Linked((
        ("add_kernel", (str(PACKAGE / "ops.py"),)),
        ("gelu_kernel", (str(PACKAGE / "layers" / "activation.py"),)),  # through registry.py's import
        ("mul_kernel", (str(PACKAGE / "ops.py"),)),                      # `K.mul_kernel` after `import ... as K`
        ("neg_kernel", (str(PACKAGE / "dispatch.py"),)),                 # `kernels.neg_kernel` handed to a launcher
        ("relu_kernel", (str(PACKAGE / "dispatch.py"),)),                # a value in a dict
    ))  # not square_kernel (a `__main__` block), nor cube_kernel (imported, never used)


# --------------------------------------------------------------- the index on its own

KERNEL = """\
import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({{"BLOCK": 128}})],
    key=["n"],
)
@triton.jit
def {name}(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, 0.0, mask=offs < n)
"""


def links(files: dict[str, str], tmp_path: Path) -> dict[str, Linked | None]:
    """Write the files under tmp_path, index them, and say what each file got."""
    paths = {}
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        paths[name] = str(path)
    index = ProjectIndex.build({p: Path(p).read_text() for p in paths.values()})
    return {name: index.linked(path) for name, path in paths.items()}


def used(linked: Linked | None) -> set[str]:
    return {name for name, _ in linked.users} if linked is not None else set()


@pytest.mark.parametrize("launcher", [
    "from pkg.kern import k\nk[(1,)](x, 1)\n",
    "from .kern import k as kk\nkk[(1,)](x, 1)\n",
    "import pkg.kern as K\nK.k[(1,)](x, 1)\n",
    "import pkg.kern\npkg.kern.k[(1,)](x, 1)\n",
    "from pkg import kern\nkern.k[(1,)](x, 1)\n",
    "from . import kern\nkern.k.run(x, 1, grid=(1,))\n",
    "from .kern import *\nk[(1,)](x, 1)\n",
    "from .kern import k\nKERNELS = [k]\n",
    "from .kern import k\n__all__ = ['k']\n",
])
def test_each_import_form_links_the_kernel(tmp_path: Path, launcher: str) -> None:
    found = links({"pkg/__init__.py": "", "pkg/kern.py": KERNEL.format(name="k"), "pkg/ops.py": launcher}, tmp_path)
    assert used(found["pkg/kern.py"]) == {"k"}
    assert found["pkg/ops.py"] == Linked()


@pytest.mark.parametrize("launcher", [
    "from .kern import k\n",                                    # imported, never used
    "from .kern import k\nif __name__ == '__main__':\n    k[(1,)](x, 1)\n",
    "from .other import k\nk[(1,)](x, 1)\n",                    # the same name in another module
    "import pkg.kern as K\nK.k_other[(1,)](x, 1)\n",            # another attribute
    "k[(1,)](x, 1)\n",                                          # no import: not this module's k
])
def test_what_is_no_use_of_the_kernel(tmp_path: Path, launcher: str) -> None:
    found = links({"pkg/__init__.py": "", "pkg/kern.py": KERNEL.format(name="k"),
                   "pkg/other.py": KERNEL.format(name="k"), "pkg/ops.py": launcher}, tmp_path)
    assert used(found["pkg/kern.py"]) == set()


def test_an_alias_made_with_triton_jit_links_under_its_name(tmp_path: Path) -> None:
    kern = "import triton\n\ndef _k(x_ptr):\n    pass\n\nk = triton.jit(_k)\n"
    found = links({"kern.py": kern, "ops.py": "from kern import k\nk[(1,)](x)\n"}, tmp_path)
    assert used(found["kern.py"]) == {"k"}


def test_files_outside_the_check_are_not_read(tmp_path: Path) -> None:
    """Only the files handed to the index count: a launcher beside them, unchecked, does not."""
    (tmp_path / "ops.py").write_text("from kern import k\nk[(1,)](x)\n")
    (tmp_path / "kern.py").write_text(KERNEL.format(name="k"))
    (tmp_path / "other.py").write_text("import triton\n")
    index = ProjectIndex.build({str(tmp_path / n): (tmp_path / n).read_text() for n in ("kern.py", "other.py")})
    assert index.linked(str(tmp_path / "kern.py")) == Linked()
    assert index.linked(str(tmp_path / "ops.py")) is None
    assert ProjectIndex.build({str(tmp_path / "kern.py"): KERNEL}).linked(str(tmp_path / "kern.py")) is None


def test_a_file_the_index_cannot_read_costs_only_itself(tmp_path: Path) -> None:
    found = links({"kern.py": KERNEL.format(name="k"), "ops.py": "from kern import k\nk[(1,)](x)\n",
                   "broken.py": "from kern import k\ndef (:\n", "deep.py": "from kern import k\nx = " + "(" * 300 + "k"
                   + ")" * 300 + "\n", "long.py": "from kern import k\nx = k" + " + k" * 200_000 + "\n"}, tmp_path)
    assert found["kern.py"] == Linked((("k", (str(tmp_path / "ops.py"),)),))


@pytest.mark.parametrize("path", sorted((ROOT / "fixtures" / "triton").rglob("*.py")), ids=lambda p: p.name)
def test_the_text_scan_finds_every_kernel_the_parser_finds(path: Path) -> None:
    """The index parses only files that mention a name the text scan found: it must miss none."""
    text = path.read_text(encoding="utf-8")
    summary = summarize(text)
    assert summary is not None
    assert summary.kernels <= kernel_candidates(text)


@pytest.mark.parametrize("text, kernels", [
    ("@triton.jit\ndef exp(x): return tl.exp(x)\n", set()),                       # a device function
    ('@triton.jit\ndef k(x_ptr):\n    """No return value."""\n    tl.store(x_ptr, 1)\n', {"k"}),
    ("@triton.jit(\n    do_not_specialize=['n'],\n)\ndef k(x_ptr, n):\n    pass\n", {"k"}),
    ("if HAS_TRITON:\n\t@triton.jit\n\tdef k(x_ptr):\n\t\tpass\n", {"k"}),
    ("@libentry()\n@triton.autotune(\n    configs=[],\n    key=['n'],\n)\n# a comment\n@triton.jit\n"
     "def k(x_ptr, n):\n    pass\n", {"k"}),
    ("@staticmethod\ndef forward(ctx, x):\n    pass\n", set()),                     # not a kernel decorator
])
def test_kernel_candidates(text: str, kernels: set[str]) -> None:
    summary = summarize(text)
    assert summary is not None and summary.kernels == kernels
    assert kernel_candidates(text) == kernels


def test_only_statements_naming_the_words_are_walked() -> None:
    text = ("import pkg.kern as K\nfrom .kern import k as kk\n\n"
            "def launch(x):\n    y = other(x)\n    K.k2[\n        (1,)\n    ](x)\n    run(kk)\n")
    summary = summarize(text, words={"k2", "k"})
    assert summary is not None
    assert {"K.k2", "run", "kk", "x"} <= summary.references  # the launch spans lines; `kk` is bound to `k`
    assert "other" not in summary.references
    assert "other" in summarize(text).references


# --------------------------------------------------------------- the pipeline's guarantees

LAUNCHER = """\
import torch
import triton
import triton.language as tl

from kern import {name}


def run_{name}(x):
    {name}[(triton.cdiv(x.numel(), 128),)](x, x.numel())
    return x
"""


@pytest.fixture
def tree(tmp_path: Path, monkeypatch) -> Path:
    """One module of nine kernels, launching the first itself; eight launchers of one each
    (every file mentions triton and jit, so all ten are analyzed: enough for the pool)."""
    kern = "\n\n".join(KERNEL.format(name=f"k{i}") for i in range(9))
    kern += "\n\ndef run_k0(x):\n    k0[(triton.cdiv(x.numel(), 128),)](x, x.numel())\n    return x\n"
    (tmp_path / "kern.py").write_text(kern)
    for i in range(1, 9):
        (tmp_path / f"ops{i}.py").write_text(LAUNCHER.format(name=f"k{i}") + "# no jit here\n")
    (tmp_path / "pyproject.toml").write_text("[tool.kanalyze]\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KANALYZE_CACHE_DIR", str(tmp_path / ".cache"))
    monkeypatch.setattr(cache_module, "_fingerprint", lambda salt="": hashlib.sha256(salt.encode()).hexdigest()[:16])
    return tmp_path


def dead(result) -> list[str]:
    return sorted(f.kernel for f in result.findings if f.code == "RES001" and "never launched" in f.message)


def as_json(result) -> str:
    return json.dumps([f.to_dict() for f in result.findings], sort_keys=True)


def test_the_pool_and_a_single_process_give_the_same_bytes(tree: Path) -> None:
    runs = [run_static(["."], load_config(["."]), use_cache=False, jobs=jobs) for jobs in (1, 2, 2)]
    assert dead(runs[0]) == []
    assert runs[0].files_parsed == 9  # kern.py and eight launchers: the pool's threshold is met
    assert as_json(runs[0]) == as_json(runs[1]) == as_json(runs[2])


def test_the_cache_is_keyed_by_what_the_index_contributed(tree: Path) -> None:
    cold = run_static(["."], load_config(["."]), jobs=1)
    assert dead(cold) == []
    warm = run_static(["."], load_config(["."]), jobs=1)
    assert (warm.files_parsed, as_json(warm)) == (0, as_json(cold))

    # ops3.py stops launching k3: kern.py's text is the same, its findings are not.
    (tree / "ops3.py").write_text("import triton\n# jit\n")
    changed = run_static(["."], load_config(["."]), jobs=1)
    assert dead(changed) == ["k3"]
    assert changed.files_parsed == 2  # ops3.py, and kern.py (what the index told it changed)

    # Checked alone, kern.py is not answered from the tree's entry: nothing says who launches its kernels.
    alone = run_static(["kern.py"], load_config(["."]), jobs=1)
    assert dead(alone) == [f"k{i}" for i in range(1, 9)]
    again = run_static(["."], load_config(["."]), jobs=1)
    assert as_json(again) == as_json(changed)


def test_what_the_index_says_reaches_isolated_runs(tree: Path) -> None:
    """A file analyzed in a process of its own (a crashed pool's re-run, a file the nesting
    guard is unsure of) gets its links too."""
    from kanalyze.check import static

    text = (tree / "kern.py").read_text()
    index = ProjectIndex.build({p.name: p.read_text() for p in sorted(tree.glob("*.py"))})
    linked = {"kern.py": index.linked("kern.py")}
    [(_, with_links, _)] = static._analyze_isolated([("kern.py", text)], {"proofs": False}, 20.0, 1, linked)
    [(_, alone, _)] = static._analyze_isolated([("kern.py", text)], {"proofs": False}, 20.0, 1, {})
    assert not [f for f in with_links if f["code"] == "RES001"]
    assert len([f for f in alone if f["code"] == "RES001"]) == 8
