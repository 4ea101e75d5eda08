"""The z3 bounds proofs (MEM003, MEM004): verdicts, counterexamples, assumptions, hand-off."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kanalyze.analyzer.bounds import proofs as bounds
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.check import analyze_text

ROOT = Path(__file__).resolve().parent.parent

HEADER = "import torch\nimport triton\nimport triton.language as tl\n\n"

COPY = HEADER + textwrap.dedent("""
    @triton.jit
    def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs {op} n
        x = tl.load(x_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x, mask=mask)

    def copy(x):
        out = torch.empty_like(x)
        n = x.numel()
        copy_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
""")


def analysis(source: str, **ranges) -> bounds.BoundsAnalysis:
    model = TritonModule.from_source("kernel.py", source)
    if ranges:
        model.settings = {key.replace("_", "-"): value for key, value in ranges.items()}
    return bounds.analyze(model)


def findings(source: str, code: str):
    found, _ = analyze_text("kernel.py", source)
    return [f for f in found if f.code == code]


# --- MEM003 -------------------------------------------------------------------------------------

def test_off_by_one_mask_gives_the_smallest_counterexample_and_the_clean_twin_is_proved() -> None:
    flagged = analysis(COPY.format(op="<="))
    load = next(a for a in flagged.accesses if a.kind == "load")
    assert load.bounds.status == "violated"
    example = load.bounds.counterexample
    assert example["sizes"] == {"n": 1}
    assert example["shapes"] == {"x": [1], "out": [1]}
    assert (example["program"], example["lane"], example["offset"], example["extent"]) == ([0], [1], 1, 1)
    assert example["minimal"] is True and example["grid"] == [1]
    assert example["tensor"] == "x" and example["parameter"] == "x_ptr" and example["wrapper"] == "copy"

    clean = analysis(COPY.format(op="<"))
    assert {a.bounds.status for a in clean.accesses} == {"proved"}


def test_finding_quotes_the_counterexample_and_carries_the_hand_off() -> None:
    [load, store] = findings(COPY.format(op="<="), "MEM003")
    assert "with n=1, program 0 lane 1 reads x[1] past its end (1 element)" in load.message
    assert "writes out[1]" in store.message
    evidence = load.evidence
    assert evidence["gate"] == "mem003-bounds-run"
    assert evidence["counterexample"]["sizes"] == {"n": 1}
    assert "[1, 1048576]" in evidence["assumptions"]["sizes"]
    json.dumps(evidence)  # the hand-off is plain data


def test_max_size_bounds_the_sizes_a_proof_covers() -> None:
    # Correct only while n <= 4096: the output is allocated with a fixed size.
    source = HEADER + textwrap.dedent("""
        @triton.jit
        def head_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
            tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

        def head(x):
            out = torch.empty(4096, device=x.device)
            n = x.numel()
            head_kernel[(triton.cdiv(n, 128),)](x, out, n, BLOCK=128)
            return out
    """)
    store = next(a for a in analysis(source).accesses if a.kind == "store")
    assert store.bounds.status == "violated"
    assert store.bounds.counterexample["sizes"] == {"n": 4097}
    small = next(a for a in analysis(source, max_size=4096).accesses if a.kind == "store")
    assert small.bounds.status == "proved"


def test_wrapper_checks_are_preconditions() -> None:
    source = HEADER + textwrap.dedent("""
        @triton.jit
        def tail_kernel(x_ptr, n, first, BLOCK: tl.constexpr):
            offs = first + tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
            tl.store(x_ptr + offs, 0.0, mask=offs < n)

        def tail(x, count):
            n = x.numel()
            {check}
            tail_kernel[(triton.cdiv(count, 256),)](x, n, n - count, BLOCK=256)
    """)
    checked = analysis(source.replace("{check}", "assert count <= n"))
    assert checked.accesses[0].bounds.status == "proved"
    unchecked = analysis(source.replace("{check}", "pass"))
    example = unchecked.accesses[0].bounds.counterexample
    assert unchecked.accesses[0].bounds.status == "violated" and example["offset"] < 0
    assert example["sizes"]["first"] < 0


def test_loop_carried_pointers_and_two_d_tiles() -> None:
    source = (ROOT / "fixtures/triton/mem003_tiles_2d.py").read_text()
    by_line = {}
    model = TritonModule.from_source("tiles.py", source)
    from kanalyze.analyzer.positions import Positions

    positions = Positions(model.module, source)
    for access in bounds.analyze(model).accesses:
        by_line[positions.span(access.call)[0]] = access.bounds
    k_tail = by_line[next(i for i, line in enumerate(source.splitlines(), 1)
                          if "tl.load(a_ptrs, mask=rm[:, None] < M" in line)]
    assert k_tail.status == "violated"
    assert k_tail.counterexample["loop"] == {"k": 0}
    assert k_tail.counterexample["lane"] == [0, 1]


def test_unmodeled_accesses_are_unknown_with_a_reason_never_flagged() -> None:
    source = HEADER + textwrap.dedent("""
        @triton.jit
        def gather_kernel(idx_ptr, x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
            idx = tl.load(idx_ptr + offs, mask=offs < n, other=0)
            g = tl.load(x_ptr + idx, mask=offs < n)
            y = tl.load(y_ptr + offs, mask=offs < n)
            tl.store(out_ptr + offs, g + y, mask=offs < n)

        def gather(idx, x, y):
            out = torch.empty_like(idx, dtype=torch.float32)
            n = idx.numel()
            gather_kernel[(triton.cdiv(n, 256),)](idx, x, y, out, n, BLOCK=256)
            return out
    """)
    reports = {a.tensor or a.parameter: a for a in analysis(source).accesses}
    assert reports["x"].bounds.status == "unknown"
    assert "loaded from memory" in reports["x"].bounds.reason
    assert reports["y"].bounds.status == "unknown"
    assert "never reads its shape" in reports["y"].bounds.reason
    assert reports["idx"].bounds.status == "proved"
    assert not findings(source, "MEM003")


def test_an_unread_grid_is_an_approximation_not_a_counterexample() -> None:
    source = COPY.format(op="<=").replace("copy_kernel[(triton.cdiv(n, 1024),)]", "copy_kernel[grid_of(n)]")
    load = next(a for a in analysis(source).accesses if a.kind == "load")
    assert load.bounds.status == "unknown"
    assert "grid" in load.bounds.reason


def test_mem003_does_not_repeat_cmp003_on_an_unmasked_access() -> None:
    source = COPY.format(op="<").replace("x = tl.load(x_ptr + offs, mask=mask)", "x = tl.load(x_ptr + offs)")
    found, _ = analyze_text("kernel.py", source)
    codes = [(f.location.row, f.code) for f in found]
    row = next(i for i, line in enumerate(source.splitlines(), 1) if "tl.load(x_ptr + offs)" in line)
    assert (row, "CMP003") in codes and (row, "MEM003") not in codes
    load = next(a for a in analysis(source).accesses if a.kind == "load")
    assert load.bounds.status == "violated"  # the proof itself still fails


# --- MEM004 -------------------------------------------------------------------------------------

INT32 = HEADER + textwrap.dedent("""
    @triton.jit
    def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = {pid} * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)

    def scale(x):
        out = torch.empty_like(x)
        n = x.numel()
        scale_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
""")


def test_int32_program_offsets_wrap_past_two_to_the_31() -> None:
    [finding] = findings(INT32.format(pid="tl.program_id(0)"), "MEM004")
    example = finding.evidence["counterexample"]
    assert example["sizes"] == {"n": 2**31 + 1}
    assert example["value"] == 2**31 and example["wraps_in"] == "mask"
    assert example["program"] == [2**21] and example["max_numel"] == 2**32
    assert finding.evidence["expression"] == "tl.program_id(0) * BLOCK"
    assert "2^32 elements (`max-numel`)" in finding.message and "tl.program_id(0).to(tl.int64)" in finding.message
    assert not findings(INT32.format(pid="tl.program_id(0).to(tl.int64)"), "MEM004")


def test_max_numel_is_the_assumed_bound() -> None:
    source = INT32.format(pid="tl.program_id(0)")
    model = TritonModule.from_source("kernel.py", source)
    model.settings = {"max-numel": 2**31}
    assert all(not a.wraps for a in bounds.analyze(model).accesses)


def test_masked_off_lanes_may_wrap_but_the_mask_may_not() -> None:
    # `rows * stride` wraps only in rows the mask drops when stride is small... but a
    # mask computed from a wrapped value is itself a wrap that counts.
    source = HEADER + textwrap.dedent("""
        @triton.jit
        def rows_kernel(x_ptr, n_rows, stride, BLOCK: tl.constexpr):
            rows = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
            tl.store(x_ptr + rows * stride, 0.0, mask=rows < n_rows)

        def rows(x):
            n_rows = x.shape[0]
            rows_kernel[(triton.cdiv(n_rows, 64),)](x, n_rows, x.stride(0), BLOCK=64)
    """)
    store = analysis(source).accesses[0]
    assert store.overflow.status == "proved"  # int64 rows: nothing wraps


def test_runtime_integers_are_int64_only_when_large() -> None:
    # `row * n_cols`: n_cols is int32 below 2^31 (and then the product wraps).
    source = HEADER + textwrap.dedent("""
        @triton.jit
        def row_kernel(x_ptr, n_cols, BLOCK: tl.constexpr):
            row = tl.program_id(0)
            cols = tl.arange(0, BLOCK)
            tl.store(x_ptr + row * n_cols + cols, 0.0, mask=cols < n_cols)

        def fill(x):
            n_rows, n_cols = x.shape
            row_kernel[(n_rows,)](x, n_cols, BLOCK=triton.next_power_of_2(n_cols))
    """)
    [finding] = findings(source, "MEM004")
    example = finding.evidence["counterexample"]
    assert example["sizes"]["n_cols"] < 2**31 and example["value"] >= 2**31
    assert finding.evidence["expression"] == "row * n_cols"


# --- plumbing ---------------------------------------------------------------------------------

def test_files_without_launched_accesses_do_not_import_z3() -> None:
    code = textwrap.dedent(f"""
        import sys
        from kanalyze.check import analyze_text
        kernel_only = {HEADER!r} + "@triton.jit\\ndef k(x_ptr):\\n    tl.store(x_ptr, 1.0)\\n"
        analyze_text("a.py", kernel_only)
        print("z3" in sys.modules)
        analyze_text("b.py", {COPY.format(op="<")!r})
        print("z3" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.split() == ["False", "True"]


def test_solver_budget_exhausted_is_unknown() -> None:
    import z3

    from kanalyze.analyzer.bounds.solver import Budget, Settings, solve

    x = z3.Int("x")
    budget = Budget(Settings(file_rlimit=0))
    assert solve([x > 3], budget) == ("unknown", None)
    budget = Budget(Settings())
    status, model = solve([x > 3, x < 5], budget)
    assert status == "sat" and model.eval(x).as_long() == 4


def test_config_validates_the_proof_ranges(tmp_path: Path) -> None:
    from kanalyze.config import ConfigError, load_config

    (tmp_path / "pyproject.toml").write_text("[tool.kanalyze]\nmax-size = 4096\nmax-numel = 2147483648\n")
    config = load_config([str(tmp_path)])
    assert bounds.proof_ranges(config.raw) == {"max-size": 4096, "max-numel": 2**31}
    (tmp_path / "pyproject.toml").write_text("[tool.kanalyze]\nmax-size = 0\n")
    with pytest.raises(ConfigError, match="max-size"):
        load_config([str(tmp_path)])


def test_check_honours_max_numel_from_the_config(tmp_path: Path) -> None:
    from kanalyze.check import run_static
    from kanalyze.config import load_config

    (tmp_path / "kernel.py").write_text(INT32.format(pid="tl.program_id(0)"))
    (tmp_path / "pyproject.toml").write_text('[tool.kanalyze]\nselect = ["ALL"]\n')  # MEM004 is opt-in
    default = run_static([str(tmp_path)], load_config([str(tmp_path)]), use_cache=True)
    assert [f.code for f in default.findings if f.code == "MEM004"] == ["MEM004"]
    (tmp_path / "pyproject.toml").write_text('[tool.kanalyze]\nselect = ["ALL"]\nmax-numel = 2147483648\n')
    lowered = run_static([str(tmp_path)], load_config([str(tmp_path)]), use_cache=True)
    assert not [f for f in lowered.findings if f.code == "MEM004"]  # and the cache did not answer for it
    off = run_static([str(tmp_path)], load_config([str(tmp_path)], select=["DEFAULT"]), use_cache=True)
    assert not [f for f in off.findings if f.code.startswith("MEM00")]  # the default selection skips the proofs


def test_the_launch_path_in_the_wrapper_is_a_precondition() -> None:
    # Unmasked over 1024 lanes: in bounds only because the wrapper launches at n == 1024.
    source = HEADER + textwrap.dedent("""
        @triton.jit
        def head_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            tl.store(out_ptr + offs, tl.load(x_ptr + offs))

        def fallback_first(x):
            if x.numel() != 1024:
                return x.clone()
            out = torch.empty_like(x)
            head_kernel[(1,)](x, out, x.numel(), BLOCK=1024)
            return out

        def in_a_branch(x):
            out = torch.empty_like(x)
            if x.numel() == 1024:
                head_kernel[(1,)](x, out, x.numel(), BLOCK=1024)
            else:
                out.copy_(x)
            return out

        def unguarded(x):
            out = torch.empty_like(x)
            head_kernel[(1,)](x, out, x.numel(), BLOCK=1024)
            return out
    """)
    guarded = source[:source.index("def unguarded")]
    [store, load] = analysis(guarded).accesses
    assert store.configurations == 2 and {store.bounds.status, load.bounds.status} == {"proved"}
    [store, load] = analysis(source).accesses
    assert store.bounds.status == "violated" and store.bounds.counterexample["wrapper"] == "unguarded"
    assert store.bounds.counterexample["sizes"] == {"n": 1}


def test_a_stride_read_means_a_dimension_follows() -> None:
    source = HEADER + textwrap.dedent("""
        @triton.jit
        def rows_kernel(x_ptr, stride, BLOCK: tl.constexpr):
            row = tl.program_id(0).to(tl.int64)
            cols = tl.arange(0, BLOCK)
            tl.store(x_ptr + row * stride + cols, 0.0, mask=cols < stride)

        def zero_rows(x):
            rows_kernel[(x.shape[0],)](x, x.stride(0), BLOCK=triton.next_power_of_2(x.stride(0)))
    """)
    [store] = analysis(source).accesses
    assert store.bounds.status == "proved"  # x is read as (rows, stride): 2-D, not 1-D
