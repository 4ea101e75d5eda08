"""What a rule is.

A rule is one clause of the contract catalog (../DESIGN.md): a code, a
kebab-case name, its docs, the gate that confirms it, and zero or more static
detectors over the kernel model.  In the spirit of Fixit, every rule carries
its own examples: `VALID` snippets must not fire, `INVALID` snippets must fire
(tests/test_rule_examples.py runs them all).

A detector yields `Report`s: a CST node plus a message.  Rules never compute
positions, never print, never run a gate; the pipeline does that.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterator

import libcst as cst

from kanalyze.analyzer.cstwalk import node_text
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.findings import rule_url


# The evidence key of RES001's report that a kernel is never launched: the findings of other
# clauses inside that kernel are dropped (check/dead_kernels.py).
NEVER_LAUNCHED = "never_launched"


@dataclass
class Report:
    """A detector's raw output: where (a node) and what (a message)."""

    code: str
    node: cst.CSTNode
    message: str
    kernel: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)


class Rule:
    code: ClassVar[str] = ""
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""          # one line, for `kanalyze rules` and SARIF
    gate: ClassVar[str] = ""             # the dynamic gate that decides this clause
    severity: ClassVar[str] = "error"    # error | warning
    has_detectors: ClassVar[bool] = True
    # Markdown in the form What it does / Why is this bad / Example / Use instead.
    docs: ClassVar[str] = ""
    VALID: ClassVar[list[str]] = []
    INVALID: ClassVar[list[str]] = []

    def check(self, model: TritonModule) -> Iterator[Report]:
        return iter(())

    def report(self, node: cst.CSTNode, message: str, *, kernel: str | None = None, **evidence: Any) -> Report:
        evidence.setdefault("gate", self.gate)
        return Report(self.code, node, message, kernel, evidence)

    @classmethod
    def help_uri(cls) -> str:
        return rule_url(cls.code, cls.name)


def source(code: str) -> str:
    """Dedent an example snippet (rules write them indented inside the class)."""
    return textwrap.dedent(code).lstrip("\n")


def expr_text(model: TritonModule, node: cst.CSTNode, limit: int = 60) -> str:
    """The source text of an expression, shortened for a message."""
    text = node_text(model.module, node)
    return text if len(text) <= limit else text[: limit - 1] + "…"
