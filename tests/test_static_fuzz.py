"""The static pass under fuzzed input: seeded mutants of the fixtures and generated extremes
(bench/fuzz_mutations.py) go through `kanalyze check` as a user runs it (bench/fuzz_static.py,
which runs thousands).

A mutant may be refused (KAN000) but the run must never end in a traceback, report an
internal error (KAN001: a rule failed, a worker crashed, a file ran past its budget) or
hang.  A failure names the mutant: `python bench/fuzz_static.py --count N --seed S --keep
DIR` writes it out to reproduce.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import fuzz_mutations  # noqa: E402
import fuzz_static  # noqa: E402

SEED, COUNT = 2026, 240


def test_mutants_of_the_fixtures_never_crash_hang_or_fail_inside() -> None:
    outcome = fuzz_static.run(SEED, COUNT, fuzz_mutations.seed_files())
    assert outcome.files == COUNT
    assert not outcome.failures, "\n".join(outcome.failures)
    # The mutants are not all refused: most still parse and are analysed, findings and all.
    assert outcome.refused < COUNT // 2 and outcome.findings > COUNT // 2, (outcome.refused, outcome.findings)


def test_the_editors_layout_reads_every_mutant_without_raising() -> None:
    """The language server cuts a document into blocks it can analyse apart (lsp/layout.py):
    on a mutant it may give up (a reason, the file analysed whole) but never raise.  Found by
    the mutants: a block of nothing but a continuation (IndexError), a block nested deeper than
    the block reader follows (RecursionError)."""
    from kanalyze.lsp.blocks import block_facts
    from kanalyze.lsp.layout import cut

    previous = None
    for name, text in fuzz_mutations.mutants(SEED + 5, 600, fuzz_mutations.seed_files()):
        if not name.endswith(".py"):
            continue
        layout = cut(text, previous)
        previous = layout if not isinstance(layout, str) else previous
        block_facts(text, True)


def test_the_mutants_are_the_same_for_the_same_seed_and_mutate_every_way() -> None:
    seeds = fuzz_mutations.seed_files()
    first, again = fuzz_mutations.mutants(SEED, 50, seeds), fuzz_mutations.mutants(SEED, 50, seeds)
    assert first == again and fuzz_mutations.mutants(SEED + 1, 50, seeds) != first
    text = "def f(a, b):\n    x = a + 1\n    k[(4,)](a, b, 12)\n    return x\n"
    rng = random.Random(0)
    for mutation in fuzz_mutations.PY_MUTATIONS:
        changed = {mutation(text, rng) for _ in range(20)}
        assert changed - {text}, f"{mutation.__name__} never changed the text"
    assert fuzz_mutations.fullwidth("tl.dot") == "ｔｌ.ｄｏｔ"
