"""fixtures/adversarial/README.md indexes the adversarial suite: every candidate it names exists,
every hostile candidate is named, and every row names a test that exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INDEX = ROOT / "fixtures" / "adversarial" / "README.md"
KB = ROOT / "fixtures" / "kernelbench"


def rows() -> list[list[str]]:
    lines = [line for line in INDEX.read_text().splitlines() if line.startswith("| ") and "`" in line]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


def named_files(cell: str) -> list[Path]:
    """`hostile/x.py`, or `hostile/level1_problem6_{a,b}.py` for several."""
    files = []
    for pattern in re.findall(r"`([^`]+\.py)`", cell):
        brace = re.search(r"\{([^}]*)\}", pattern)
        names = [pattern.replace(brace.group(0), part) for part in brace.group(1).split(",")] if brace else [pattern]
        files += [KB / name for name in names]
    return files


def test_every_named_candidate_exists_and_every_row_names_a_test() -> None:
    tests = "\n".join(path.read_text() for path in (ROOT / "tests").glob("test_*.py"))
    table = rows()
    assert len(table) >= 20
    for attack, candidate, verdict, test in table:
        files = named_files(candidate)
        assert files, attack
        assert all(path.is_file() for path in files), [str(p) for p in files if not p.is_file()]
        name = test.strip("`")
        assert re.search(rf"^def {re.escape(name)}\(", tests, re.M), f"{attack}: no test named {name}"


def test_every_hostile_candidate_is_in_the_index() -> None:
    indexed = {path.resolve() for row in rows() for path in named_files(row[1])}
    hostile = {path.resolve() for path in (KB / "hostile").glob("*.py")}
    assert sorted(p.name for p in hostile - indexed) == []
