"""The kernel model's name lookups through its one tree-sitter query (declarations of a
name, assignments to it) give what a search around every use of the name gives."""

from __future__ import annotations

import random
import re
import sys
from pathlib import Path

from kanalyze.analyzer.cuda.build import read_declaration
from kanalyze.analyzer.cuda.inline_plain import read_plain
from kanalyze.analyzer.cuda.model import CudaModule
from kanalyze.analyzer.cuda.sources import CudaUnit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from cuda_corpus import solution  # noqa: E402


def units() -> list[CudaUnit]:
    found = [CudaUnit(str(p), p.read_text(), "file") for p in sorted((ROOT / "fixtures" / "cuda").glob("*.cu"))]
    rng = random.Random(3)
    for index in range(30):
        suffix, text = solution(rng, index)
        if suffix == ".cu":
            found.append(CudaUnit("s.cu", text, "file"))
        else:
            found.extend(u for ext in read_plain("s.py", text)[0] for u in ext.units)
    return found


def searched_declaration(model: CudaModule, function, name: str):
    """The first declaration of `name` in the body, searching around every use of it."""
    for declaration in model.find_words((name,), "declaration"):
        if function.body.start_byte <= declaration.start_byte < function.body.end_byte:
            found = next((v for v in read_declaration(model, declaration) if v.name == name), None)
            if found is not None:
                return found
    return None


def searched_assignments(model: CudaModule, function, name: str) -> list:
    found = []
    for node in model.find_words((name,), "assignment_expression", "update_expression"):
        if not function.body.start_byte <= node.start_byte < function.body.end_byte:
            continue
        target = node.child_by_field_name("left") or node.child_by_field_name("argument")
        if target is not None and target.type == "identifier" and model.text(target) == name:
            found.append(node)
    return found


def test_lookups_agree_with_a_search_of_every_use() -> None:
    checked = declared = assigned = 0
    for unit in units():
        model = CudaModule.parse(unit)
        for function in model.functions:
            if function.body is None:
                continue
            for name in sorted(set(re.findall(r"[A-Za-z_]\w*", model.text(function.body)))):
                expected = searched_declaration(model, function, name)
                got = function._declared(name)
                assert (got.node.id if got else None) == (expected.node.id if expected else None), (unit.path, name)
                expected_nodes = {n.id for n in searched_assignments(model, function, name)}
                assert {n.id for n in function.assignments(name)} == expected_nodes, (unit.path, name)
                checked += 1
                declared += expected is not None
                assigned += bool(expected_nodes)
    assert checked > 500 and declared > 100 and assigned > 50
