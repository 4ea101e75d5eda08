"""How the dynamic pass calls a kernel: a problem (reference) paired with a candidate.

Two kinds of problem, one protocol (DESIGN.md, "How the dynamic pass calls a kernel"):

* KernelBench pairs.  The problem module defines `Model`, `get_inputs()`,
  `get_init_inputs()` and module-level integer sizes; the candidate module
  defines `ModelNew`.  Pairs are found from `--reference problem.py`, from
  `[tool.kanalyze.harness]` (`"candidate glob" = "problem.py"`), or from a
  KernelBench directory (`--kernelbench DIR`: a candidate named
  `level1_problem19_*.py` or `level_1_problem_19_*.py` pairs with
  `DIR/level1/19_*.py`).
* Library kernels.  A small contract module written next to the kernel and named
  the same ways:

      # softmax_contract.py
      import torch
      ROWS = 256                     # size knobs: module-level integers
      COLS = 1000
      CANDIDATE = "softmax"          # the callable of the kernel file under test
      DTYPES = ["float32", "float16"]  # optional: the dtypes to try (default float32)

      def reference(x):
          return torch.softmax(x, dim=-1)

      def get_inputs(dtype=torch.float32):
          return [torch.randn(ROWS, COLS, dtype=dtype)]

The module-level integers of a problem (constant expressions included: knobs.py)
are its size knobs: the harness scales
them down for the interpreter and perturbs them for CMP003.  Nothing here
imports or runs the problem: it is read with `ast`, and runs only in a worker.
"""

from __future__ import annotations

import ast
import fnmatch
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from kanalyze.dynamic.knobs import read_knobs

HOW_TO_ADD = ("add one with `--reference PROBLEM.py`, a `[tool.kanalyze.harness]` entry "
              "(\"candidate.py\" = \"problem.py\"), or `--kernelbench DIR`")

_KERNELBENCH_NAME = re.compile(r"level_?(\d+)_problem_?(\d+)(?!\d)")


@dataclass
class Harness:
    kind: str                 # "kernelbench" | "contract" | "kernel" (see kernel_harness)
    candidate: str            # the file under test
    problem: str              # the problem module or contract module
    knobs: dict[str, int]     # the problem's module-level integer sizes
    callable: str             # "ModelNew", or the contract's CANDIDATE
    dtypes: list[str] = field(default_factory=list)
    found_by: str = ""

    def to_dict(self) -> dict:
        return {"kind": self.kind, "candidate": self.candidate, "problem": self.problem,
                "knobs": self.knobs, "callable": self.callable, "dtypes": self.dtypes, "found_by": self.found_by}

    @classmethod
    def from_dict(cls, data: dict) -> "Harness":
        return cls(**data)


def kernel_harness(candidate: str, kernel: str) -> Harness:
    """A kernel called on its own, at sizes the static pass found (a z3 counterexample).

    No problem and no reference: each case carries the call to make
    (`Case.call`), and the gate judges what the run did to memory.
    """
    return Harness("kernel", candidate, candidate, {}, kernel, found_by="the static pass's counterexample")


@dataclass
class NoHarness:
    """Why a file cannot be run; the message says how to fix it."""

    reason: str


def _parse(path: str) -> ast.Module | str:
    try:
        return ast.parse(Path(path).read_text(encoding="utf-8"), filename=path)
    except (OSError, UnicodeDecodeError) as exc:
        return f"cannot read {path}: {exc}"
    except (SyntaxError, ValueError) as exc:
        return f"cannot parse {path}: {exc}"


def _top_level_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _string_constant(tree: ast.Module, name: str) -> str | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                return node.value.value
    return None


def _string_list(tree: ast.Module, name: str) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            if isinstance(node.value, (ast.List, ast.Tuple)):
                return [e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def pair(candidate: str, problem: str, found_by: str) -> Harness | NoHarness:
    """A harness for `candidate` from the problem or contract module at `problem`."""
    if not os.path.isfile(problem):
        return NoHarness(f"the problem file {problem} ({found_by}) does not exist")
    problem_tree = _parse(problem)
    if isinstance(problem_tree, str):
        return NoHarness(problem_tree)
    candidate_tree = _parse(candidate)
    if isinstance(candidate_tree, str):
        return NoHarness(candidate_tree)
    problem_names, candidate_names = _top_level_names(problem_tree), _top_level_names(candidate_tree)
    knobs = read_knobs(problem_tree)
    contract_callable = _string_constant(problem_tree, "CANDIDATE")
    if contract_callable is not None:
        missing = [n for n in ("reference", "get_inputs") if n not in problem_names]
        if missing:
            return NoHarness(f"the contract {problem} defines no {' or '.join(missing)}")
        if contract_callable not in candidate_names:
            return NoHarness(f"the contract {problem} names CANDIDATE = {contract_callable!r}, "
                             f"which {candidate} does not define")
        dtypes = _string_list(problem_tree, "DTYPES") or ["float32"]
        return Harness("contract", candidate, problem, knobs, contract_callable, dtypes, found_by)
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if n not in problem_names]
    if missing:
        return NoHarness(f"the problem {problem} defines no {', '.join(missing)} "
                         "(a KernelBench problem needs Model, get_inputs and get_init_inputs; "
                         "a contract needs CANDIDATE, reference and get_inputs)")
    if "ModelNew" not in candidate_names:
        return NoHarness(f"{candidate} defines no `ModelNew`, the class a KernelBench candidate submits")
    return Harness("kernelbench", candidate, problem, knobs, "ModelNew", [], found_by)


def kernelbench_problem(candidate: str, directory: str) -> str | None:
    """`level1_problem19_relu.py` → `DIR/level1/19_*.py`, or None."""
    match = _KERNELBENCH_NAME.search(os.path.basename(candidate))
    if not match:
        return None
    level, number = match.groups()
    folder = Path(directory) / f"level{int(level)}"
    if not folder.is_dir():
        return None
    found = sorted(p for p in folder.glob(f"{int(number)}_*.py"))
    return str(found[0]) if found else None


def _relative(path: str, root: str) -> str:
    try:
        return os.path.relpath(os.path.abspath(path), os.path.abspath(root)).replace(os.sep, "/")
    except ValueError:
        return path


def find_harness(candidate: str, *, reference: str | None = None, kernelbench: str | None = None,
                 mapping: dict | None = None, root: str = ".") -> Harness | NoHarness:
    """The harness of one candidate file, or why there is none (with how to add one)."""
    if reference:
        return pair(candidate, reference, "--reference")
    if mapping:
        relative = _relative(candidate, root)
        for pattern, problem in mapping.items():
            if fnmatch.fnmatch(relative, pattern) or fnmatch.fnmatch(os.path.basename(candidate), pattern):
                if not isinstance(problem, str):
                    return NoHarness(f"[tool.kanalyze.harness] {pattern!r} must map to a problem path")
                return pair(candidate, str(Path(root) / problem), "[tool.kanalyze.harness]")
    if kernelbench:
        problem = kernelbench_problem(candidate, kernelbench)
        if problem:
            return pair(candidate, problem, "--kernelbench")
        return NoHarness(f"no KernelBench problem in {kernelbench} matches {os.path.basename(candidate)} "
                         "(candidates are named level1_problem19_*.py; problems are level1/19_*.py)")
    return NoHarness(f"no harness for this file: {HOW_TO_ADD}")
