"""The Python screen in front of z3 (screen.py): sound, and the same verdicts as z3 alone."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import z3

from kanalyze.analyzer.bounds import checks as bounds_checks
from kanalyze.analyzer.bounds import proofs as bounds
from kanalyze.analyzer.bounds.screen import fits_int32, in_bounds
from kanalyze.analyzer.bounds.symbols import INT32_MAX, INT32_MIN, fresh_context
from kanalyze.analyzer.positions import Positions
from kanalyze.analyzer.triton.model import TritonModule

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted((ROOT / "fixtures" / "triton").glob("*.py"))
HEADER = "import torch\nimport triton\nimport triton.language as tl\n\n"


def _verdicts(path: Path) -> list:
    text = path.read_text()
    model = TritonModule.from_source(str(path), text)
    positions = Positions(model.module, text)
    analysis = bounds.analyze(model)
    return sorted((positions.span(a.call)[0], a.kind, a.bounds.status, a.bounds.reason, a.overflow.status,
                   sorted(positions.span(w.node)[0] for w in a.wraps.values()),
                   (a.bounds.counterexample or {}).get("sizes")) for a in analysis.accesses)


def test_every_question_the_screen_proves_is_unsat_for_z3(monkeypatch) -> None:
    """Each "proved" of the screen, on every fixture, asked of z3 with the same hypotheses."""
    proved = {"bounds": 0, "int32": 0}
    wrong: list[str] = []

    def confirm(kind, hypotheses, violation):
        solver = z3.Solver(ctx=violation.ctx)
        solver.add(hypotheses + [violation])
        if solver.check() != z3.unsat:
            wrong.append(f"{kind}: {violation}")
        proved[kind] += 1

    def screened_in_bounds(offset, extent, hypotheses, eliminated):
        result = in_bounds(offset, extent, hypotheses, eliminated)
        if result:
            confirm("bounds", hypotheses, z3.Or(offset < 0, offset >= extent))
        return result

    def screened_fits(value, hypotheses, eliminated):
        result = fits_int32(value, hypotheses, eliminated)
        if result:
            confirm("int32", hypotheses, z3.Or(value > INT32_MAX, value < INT32_MIN))
        return result

    monkeypatch.setattr(bounds_checks, "in_bounds", screened_in_bounds)
    monkeypatch.setattr(bounds_checks, "fits_int32", screened_fits)
    for path in FIXTURES:
        _verdicts(path)
    assert not wrong
    # The screen must decide the common idioms, or it is only overhead.
    assert proved["bounds"] >= 150 and proved["int32"] >= 10, proved


def test_the_screen_changes_no_verdict_on_the_fixtures(monkeypatch) -> None:
    with_screen = {path.name: _verdicts(path) for path in FIXTURES}
    monkeypatch.setattr(bounds_checks, "SCREEN", False)
    without = {path.name: _verdicts(path) for path in FIXTURES}
    assert with_screen == without


def test_masked_idioms_need_no_solver() -> None:
    source = HEADER + textwrap.dedent("""
        @triton.jit
        def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)

        @triton.jit
        def tile_kernel(x_ptr, out_ptr, M, N, stride, BM: tl.constexpr, BN: tl.constexpr):
            rm = tl.program_id(0).to(tl.int64) * BM + tl.arange(0, BM)
            rn = tl.program_id(1).to(tl.int64) * BN + tl.arange(0, BN)
            offs = rm[:, None] * stride + rn[None, :]
            mask = (rm[:, None] < M) & (rn[None, :] < N)
            tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)

        def copy(x):
            out = torch.empty_like(x)
            n = x.numel()
            copy_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
            return out

        def tile(x):
            M, N = x.shape
            out = torch.empty_like(x)
            tile_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 64))](x, out, M, N, x.stride(0), BM=32, BN=64)
            return out
    """)
    analysis = bounds.analyze(TritonModule.from_source("kernel.py", source))
    assert {a.bounds.status for a in analysis.accesses} == {"proved"}
    assert {a.overflow.status for a in analysis.accesses} == {"proved"}
    assert analysis.queries == 0 and analysis.screened == 4


# --- the screen alone, on hand-made questions -------------------------------------------------

@pytest.fixture
def terms():
    fresh_context()
    n, pid, lane = z3.Int("n"), z3.Int("pid"), z3.Int("lane")
    offs = pid * 128 + lane
    facts = [n >= 1, n <= 2**20, pid >= 0, pid < (n + 127) / 128, lane >= 0, lane < 128]
    yield n, pid, lane, offs, facts
    fresh_context()


def test_masked_offsets_are_proved_and_an_off_by_one_is_not(terms) -> None:
    n, pid, lane, offs, facts = terms
    eliminated = {"pid", "lane"}
    assert in_bounds(offs, n, facts + [offs < n], eliminated)
    assert not in_bounds(offs, n, facts + [offs <= n], eliminated)
    assert not in_bounds(offs, n, facts, eliminated)           # unmasked: the last block runs past n
    assert in_bounds(offs, n * 128, facts, eliminated)          # ... but not past the padded size
    assert not in_bounds(offs - 1, n, facts + [offs < n], eliminated)  # lane 0 of program 0 reads x[-1]


def test_two_d_tiles_and_signs(terms) -> None:
    n, pid, lane, offs, facts = terms
    m, row, col = z3.Int("m"), z3.Int("row"), z3.Int("col")
    facts += [m >= 1, m <= 2**20, row >= 0, col >= 0]
    eliminated = {"pid", "lane", "row", "col"}
    tile = row * n + col
    assert in_bounds(tile, m * n, facts + [z3.And(row < m, col < n)], eliminated)
    assert not in_bounds(tile, m * n, facts + [z3.And(row < m, col <= n)], eliminated)
    assert not in_bounds(tile, m * n, facts + [row < m, col < n + 1], eliminated)
    # a factor that may be negative multiplies no bounds
    shift = z3.Int("shift")
    assert not in_bounds((row - shift) * n + col, m * n, facts + [row < m, col < n, shift <= 0], eliminated)


def test_int32_range(terms) -> None:
    n, pid, lane, offs, facts = terms
    eliminated = {"pid", "lane"}
    assert fits_int32(lane + 1, facts, eliminated)
    assert fits_int32(offs, facts, eliminated)                          # n <= 2^20 here
    big = [n >= 1, n <= 2**32, pid >= 0, pid < (n + 127) / 128, lane >= 0, lane < 128]
    assert not fits_int32(offs, big, eliminated)                        # 2^32 elements: it wraps
    assert not fits_int32(lane - 2**31 - 1, facts, eliminated)


def test_one_incremental_solver_a_file_gives_up_per_question_and_recovers() -> None:
    from kanalyze.analyzer.bounds.solver import Budget, Settings, solve

    fresh_context()
    x, y, z = z3.Ints("x y z")
    budget = Budget(Settings(rlimit=2000))
    hard = [x > 0, y > 0, z > 0, x * x * x + y * y * y == z * z * z]
    assert solve(hard, budget) == ("unknown", None) and budget.timeouts == 1   # gave up: no answer, no finding
    status, model = solve([x > 3, x < 5], budget)                             # the same solver, next question
    assert status == "sat" and model.eval(x).as_long() == 4
    assert solve([x > 3, x < 4], budget)[0] == "unsat"
    assert budget.queries == 3 and budget.solver is not None
    fresh_context()
