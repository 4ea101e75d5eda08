"""kanalyze's cheap positions must equal LibCST's PositionProvider, node for node."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.positions import Positions

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "fixtures").rglob("*.py")) + [ROOT / "kanalyze" / "analyzer" / "triton" / "model.py"]

EDGE_CASES = [
    "x = 1\r\ny = f(\r\n    2)\r\n",
    "# comment\n\n@decorator\n# between\ndef f(a,\n      b):  # trailing\n    return a  \\\n        + b\n",
    "class A:\n    def f(self):\n        '''doc\n        string'''\n        return [i for i in (1, 2)]\n",
    "s = 'caf\u00e9' + f'{x!r:>{w}}'\nt = (\n  1,\n)\n",
]


def _check(text: str) -> None:
    module = cst.parse_module(text)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    ours = Positions(module, text)
    checked = 0
    for node in walk(module):
        if node in expected and not isinstance(node, cst.Module):
            r = expected[node]
            assert ours.span(node) == (r.start.line, r.start.column + 1, r.end.line, r.end.column + 1), \
                module.code_for_node(node)[:80]
            checked += 1
    assert checked > 0


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_positions_match_libcst_on_files(path: Path) -> None:
    _check(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("text", EDGE_CASES)
def test_positions_match_libcst_on_edge_cases(text: str) -> None:
    _check(text)
