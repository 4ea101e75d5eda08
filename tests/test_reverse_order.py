"""ORD001's reversed program order on a GPU (reverse_order.py) and the autotune pin its variant
runs under (autotune_pin.py).

The rewrite is checked as text, then for what it is for, under Triton's own
interpreter (which runs a launch's programs in launch order, as a GPU nearly
does): the plant whose last writer decides its bits gives other bits reversed,
and its clean twin the same bits.  The pin is checked on a real autotuner.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kanalyze.dynamic.reverse_order import reverse_program_order

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "fixtures" / "kernelbench"
CONTROLS = json.loads((KB / "controls.json").read_text())


def test_every_program_index_of_every_kernel_is_mirrored() -> None:
    source = textwrap.dedent("""\
        import triton
        import triton.language as tl
        from triton.language import program_id

        @triton.jit
        def helper(x):
            return x + tl.program_id(axis=1)

        @triton.autotune(configs=[], key=["n"])
        @triton.jit
        def kernel(x_ptr, n):
            pid = tl.program_id(0)
            other = program_id(2)
            tl.store(x_ptr + pid, helper(other))

        def host(x):
            return tl.program_id(0)   # not a kernel: left alone
        """)
    rewritten, changes = reverse_program_order(source)
    assert [c["row"] for c in changes] == [7, 12, 13]
    # `program_id` imported by name: `num_programs` is imported beside it, after `__future__`
    assert rewritten.startswith("from triton.language import num_programs\nimport triton\n")
    future = reverse_program_order("from __future__ import annotations\n" + source)[0]
    assert future.startswith("from __future__ import annotations\nfrom triton.language import num_programs\n")
    assert "return x + (tl.num_programs(axis=1) - 1 - tl.program_id(axis=1))" in rewritten
    assert "pid = (tl.num_programs(0) - 1 - tl.program_id(0))" in rewritten
    assert "other = (num_programs(2) - 1 - program_id(2))" in rewritten
    assert "    return tl.program_id(0)   # not a kernel: left alone" in rewritten


def test_cuda_block_indices_are_mirrored_and_nothing_else() -> None:
    source = textwrap.dedent('''\
        from torch.utils.cpp_extension import load_inline
        src = """
        __global__ void k(float* out, const float* x, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            int row = blockIdx.y;
            if (i < n) atomicAdd(out + row, x[i]);
        }
        """
        ''')
    rewritten, changes = reverse_program_order(source)
    assert [(c["row"], c["from"]) for c in changes] == [(4, "blockIdx.x"), (5, "blockIdx.y")]
    assert "int i = (gridDim.x - 1 - blockIdx.x) * blockDim.x + threadIdx.x;" in rewritten
    assert "int row = (gridDim.y - 1 - blockIdx.y);" in rewritten
    assert reverse_program_order("import torch\nx = torch.ones(3)\n") == ("import torch\nx = torch.ones(3)\n", [])
    assert reverse_program_order("def broken(:\n") == ("def broken(:\n", [])


def test_on_a_gpu_ord001_runs_a_control_the_candidate_unchanged(tmp_path) -> None:
    """The reversed variant runs in a worker of its own; ORD001's control is the candidate as
    written in another (runner._variants), planned beside the reversed case."""
    from kanalyze.dynamic.gates.base import GateContext
    from kanalyze.dynamic.gates.ord001_permuted_order import PermutedOrder
    from kanalyze.dynamic.harness import Harness
    from kanalyze.dynamic.runner import _variants

    candidate = tmp_path / "cand.py"
    candidate.write_text("import triton\n@triton.jit\ndef k(x):\n    i = tl.program_id(0)\n")
    harness = Harness("kernelbench", str(candidate), str(candidate), {"N": 4}, "ModelNew")
    sources, rewrites = _variants(harness, ["ORD001"], {}, "cuda", None)
    assert set(sources) == {"reversed", "control"} and sources["control"] == candidate.read_text()
    assert "tl.num_programs(0) - 1 - tl.program_id(0)" in sources["reversed"] and "control" not in rewrites
    assert set(_variants(harness, ["ORD002"], {}, "cuda", None)[0]) == {"reversed"}   # its runs share a worker
    assert _variants(harness, ["ORD001"], {}, "cpu", None)[0] == {}                   # the interpreter permutes

    cases = PermutedOrder().plan(GateContext(harness, {"N": 4}, "cuda", reversal=rewrites["reversed"]))
    assert [(c.id, c.variant) for c in cases] == [("ORD001/runs", "original"), ("ORD001/reversed", "reversed"),
                                                  ("ORD001/control", "control")]


def _interpreted(script: str) -> str:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("role,expected", [("plant", "differ"), ("twin", "same")])
def test_reversed_order_changes_the_last_writer_and_nothing_in_a_clean_kernel(role, expected, tmp_path) -> None:
    pytest.importorskip("triton")
    candidate = KB / "candidates" / CONTROLS["ORD001"]["order"][role]
    reversed_file = tmp_path / candidate.name
    reversed_file.write_text(reverse_program_order(candidate.read_text())[0])
    script = textwrap.dedent(f"""\
        import importlib.util, torch
        def load(path, name):
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module.ModelNew()
        torch.manual_seed(0)
        x = torch.randn(8, 8192)
        a, b = load({str(candidate)!r}, "original")(x), load({str(reversed_file)!r}, "reversed")(x)
        assert torch.allclose(a, x.sum(1), rtol=1e-4, atol=1e-3)   # both are row sums
        print("same" if torch.equal(a, b) else "differ")
        """)
    assert _interpreted(script) == expected


def test_a_pinned_autotuner_keeps_the_config_the_candidate_chose(tmp_path) -> None:
    """Unpinned, an autotuner's first call runs every config (autotune_cpu.py: once each under
    the interpreter, as a GPU times them); pinned to the second's launch settings, it runs that
    one alone, and the launch records say so."""
    pytest.importorskip("triton")
    kernel = tmp_path / "tuned.py"
    kernel.write_text(textwrap.dedent("""\
        import triton
        import triton.language as tl

        @triton.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"])
        @triton.jit
        def double(x_ptr, n, BLOCK: tl.constexpr):
            offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) * 2, mask=offsets < n)
        """))
    script = textwrap.dedent(f"""\
        import importlib.util, json, torch, triton
        from kanalyze.dynamic import autotune_cpu, autotune_pin
        from kanalyze.dynamic.recording import LaunchCounter
        autotune_cpu.install(); autotune_pin.install()
        counter = LaunchCounter()
        launched, recorded = {{}}, {{}}
        for pinned in (None, "the second config's"):
            spec = importlib.util.spec_from_file_location(f"tuned{{len(launched)}}", {str(kernel)!r})
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            autotune_pin.pin(pinned and {{"double": [s for s in recorded["double"] if s["BLOCK"] == 64]}})
            counter.launches.clear(); counter.settings.clear()
            module.double[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](torch.ones(100), 100)
            recorded = {{name: [dict(s) for s in settings] for name, settings in counter.settings.items()}}
            launched[str(pinned is not None)] = sorted(s["BLOCK"] for s in recorded["double"])
        print(json.dumps(launched))
        """)
    assert json.loads(_interpreted(script)) == {"False": [32, 64], "True": [64]}


def test_the_launch_recorder_keeps_each_kernels_grids_as_triton_computes_them(tmp_path) -> None:
    """A tuple grid, a callable one reading a keyword and a default constexpr (as Triton binds
    them), and one of one dimension, each kept as (x, y, z); an autotuned kernel's grid reads the
    config it runs with.  Under the interpreter, whose launches go through the same hook."""
    pytest.importorskip("triton")
    kernel = tmp_path / "grids.py"
    kernel.write_text(textwrap.dedent("""\
        import triton
        import triton.language as tl

        @triton.jit
        def rows(x_ptr, n, BLOCK: tl.constexpr = 16):
            offsets = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
            tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) + 1, mask=offsets < n)

        @triton.autotune(configs=[triton.Config({"BLOCK": 64})], key=["n"])
        @triton.jit
        def tuned(x_ptr, n, BLOCK: tl.constexpr):
            offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) + 1, mask=offsets < n)
        """))
    script = textwrap.dedent(f"""\
        import importlib.util, json, torch, triton
        from kanalyze.dynamic.recording import LaunchCounter
        counter = LaunchCounter()
        spec = importlib.util.spec_from_file_location("grids", {str(kernel)!r})
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        x = torch.zeros(100)
        module.rows[(2, 7)](x, 100)
        module.rows[lambda meta: (1, triton.cdiv(meta["n"], meta["BLOCK"]))](x, n=100)
        module.rows[(3,)](x, 100, BLOCK=32)
        module.tuned[lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),)](x, 100)
        print(json.dumps({{name: sorted(grids) for name, grids in counter.grids.items()}}))
        """)
    assert json.loads(_interpreted(script)) == {"rows": [[1, 7, 1], [2, 7, 1], [3, 1, 1]], "tuned": [[2, 1, 1]]}


# ------------------------------------------------------------------ the judges on a GPU's results
# What the workers would return on a GPU, written out: the judges see the same views (results.py).

def _gpu_result(case_id: str, outputs: list, variant: str = "original", settings=None, failed: str | None = None,
                launches=None):
    import numpy as np

    from kanalyze.dynamic.cases import Case, Run
    from kanalyze.dynamic.results import Result
    from kanalyze.dynamic.sandbox.process import Outcome

    expected = np.zeros(4, dtype=np.float32)
    reference = Outcome("done", meta={"status": "ok", "inputs": [], "init_inputs": [],
                                      "output": {"prefix": "ref", "dtypes": ["float32"], "structure": "tensor"}},
                        arrays={"ref0": expected})
    arrays, runs = {}, []
    for i, values in enumerate(outputs):
        arrays[f"run{i}_0"] = np.asarray(values, dtype=np.float32)
        runs.append({"status": "ok", "launch_settings": settings or {"k": [{"BLOCK": 64}]},
                     "launches": {"k": 1} if launches is None else launches, "extension_calls": {},
                     "output": {"prefix": f"run{i}_", "dtypes": ["float32"], "structure": "tensor"}})
    candidate = Outcome("crashed", detail=failed, blame="candidate") if failed else \
        Outcome("done", meta={"status": "ok", "runs": runs}, arrays=arrays)
    case = Case(case_id, case_id.split("/")[0], {"N": 4}, runs=[Run() for _ in outputs], variant=variant)
    return Result(case, reference, candidate)


REVERSAL = [{"row": 13, "from": "tl.program_id(0)", "to": "(tl.num_programs(0) - 1 - tl.program_id(0))"}]
SAME = [[1.0, 2.0, 3.0, 4.0]] * 10


def _ord001(results, reversal=REVERSAL, flags=()):
    from kanalyze.dynamic.gates.base import GateContext
    from kanalyze.dynamic.gates.ord001_permuted_order import PermutedOrder

    return PermutedOrder().judge(GateContext(None, {"N": 4}, "cuda", list(flags), reversal=reversal), results)


OTHER_BITS = [[1.0, 2.0, 3.0000002, 4.0]]


def test_on_a_gpu_agreeing_launches_refute_only_once_the_reversed_order_agrees() -> None:
    launches, control = _gpu_result("ORD001/runs", SAME), _gpu_result("ORD001/control", SAME[:1], "control")
    agreed = _ord001([launches, _gpu_result("ORD001/reversed", SAME[:1], "reversed"), control])
    assert agreed.status == "refuted" and "and so did a run with the candidate's programs in reverse order" \
        in agreed.summary and len(agreed.cases) == 3

    other = _ord001([launches, _gpu_result("ORD001/reversed", OTHER_BITS, "reversed"), control])
    assert other.status == "confirmed", other.summary
    assert "in reverse order (tl.program_id(0) → (tl.num_programs(0) - 1 - tl.program_id(0)), line 13)" \
        in other.summary and "differ in 1 of 1 outputs (1 elements)" in other.summary
    assert "and with the candidate as written in a worker of its own" in other.summary
    assert set(other.arrays) >= {"run10_output0", "reversed_output0"} and len(other.cases) == 3

    # A CUDA C++ candidate's kernels are calls into its extension (extensions.CALLS).
    reversed_cuda = _gpu_result("ORD001/reversed", OTHER_BITS, "reversed", launches={})
    reversed_cuda.candidate.meta["runs"][0]["extension_calls"] = {"fused.fused_cuda": 1}
    assert _ord001([launches, reversed_cuda, control]).status == "confirmed"


@pytest.mark.parametrize("grids,flag,status,said", [
    # A row sum over column blocks: the 8 programs along axis 1 add to each row's one address.
    ([[4, 8, 1]], {"shared_axes": [1, 2]}, "refuted",
     "8 programs add to each address of the flagged atomic add in `k` (line 9) at the problem's sizes (grid 4×8×1; "
     "its address does not read the program id along axis 1)"),
    # Scaled or small, a row keeps two blocks: 0+a+b is 0+b+a, so agreeing runs prove nothing.
    ([[4, 2, 1]], {"shared_axes": [1, 2]}, "unconfirmed", "kanalyze can show only 2 programs adding to each address"),
    # Every program has addresses of its own, as far as the source shows: nothing counted shares one.
    ([[64, 1, 1]], {"shared_axes": [1, 2]}, "unconfirmed", "its address reads the program id of every axis"),
    # Of several grids the kernel ran with, one where enough programs share an address could show the order.
    ([[1, 2, 1], [1, 16, 1]], {"shared_axes": [0, 1, 2]}, "refuted", "16 programs add to each address"),
    # Nothing to count with (a flag of older code, an axis the source does not show): the refutation
    # stands, and says what was not counted.
    ([[4, 8, 1]], {}, "refuted", "how many programs add to each address was not counted"),
    (None, {"shared_axes": [1, 2]}, "refuted", "how many programs add to each address was not counted"),
])
def test_on_a_gpu_a_refutation_says_how_many_programs_add_to_each_address(grids, flag, status, said) -> None:
    """Power on a GPU: the grids the flagged kernel ran with (the launch recorder's), along the axes
    its atomic's address does not read (the static pass's `shared_axes`)."""
    launches = _gpu_result("ORD001/runs", SAME)
    for run in launches.candidate.meta["runs"]:
        if grids is not None:
            run["grids"] = {"k": grids}
    verdict = _ord001([launches, _gpu_result("ORD001/reversed", SAME[:1], "reversed")],
                      flags=[{"row": 9, "kernel": "k", **flag}])
    assert verdict.status == status and said in verdict.summary, verdict.summary
    assert "and so did a run with the candidate's programs in reverse order" in verdict.summary


@pytest.mark.parametrize("why,reversed_run,control,said", [
    # A DenseNet whose CUDA kernel is never called: cuDNN in a new process picked another algorithm.
    ("the reversal ran nothing", _gpu_result("ORD001/reversed", OTHER_BITS, "reversed", launches={}),
     _gpu_result("ORD001/control", OTHER_BITS, "control", launches={}),
     "that run launched none of the candidate's kernels"),
    ("the process changes the bits", _gpu_result("ORD001/reversed", OTHER_BITS, "reversed"),
     _gpu_result("ORD001/control", OTHER_BITS, "control"),
     "the candidate as written, in a worker of its own, and the launch order differ in 1 of 1 outputs (1 elements)"),
    ("no control", _gpu_result("ORD001/reversed", OTHER_BITS, "reversed"), None,
     "did not run (it was not run), so a new process alone could explain it"),
    ("the control crashed", _gpu_result("ORD001/reversed", OTHER_BITS, "reversed"),
     _gpu_result("ORD001/control", [], "control", failed="the worker died of SIGSEGV"), "did not run (the candidate"),
    ("the control chose other configs", _gpu_result("ORD001/reversed", OTHER_BITS, "reversed"),
     _gpu_result("ORD001/control", SAME[:1], "control", {"k": [{"BLOCK": 128}]}), "with other settings"),
])
def test_on_a_gpu_a_reversed_run_that_differs_confirms_only_what_the_order_did(why, reversed_run, control,
                                                                               said) -> None:
    """The reversed run is a process of its own: a difference is the order's only where the reversed
    run launched the candidate's kernels and the candidate as written, in a process of its own too,
    gave the launch order's bits."""
    results = [_gpu_result("ORD001/runs", SAME), reversed_run] + ([control] if control else [])
    verdict = _ord001(results)
    assert verdict.status == "unconfirmed" and said in verdict.summary, (why, verdict.summary)
    assert "differ in 1 of 1 outputs" in verdict.summary


@pytest.mark.parametrize("why,reversed_run,reversal,said", [
    ("nothing to reverse", None, None, "no program index (tl.program_id, blockIdx) that kanalyze can reverse"),
    ("no kernel of its own ran", _gpu_result("ORD001/reversed", SAME[:1], "reversed", launches={}), REVERSAL,
     "launched none of the candidate's kernels (no Triton launch, no call into a CUDA C++ extension"),
    ("another autotune config", _gpu_result("ORD001/reversed", SAME[:1], "reversed", {"k": [{"BLOCK": 128}]}),
     REVERSAL, "launched its kernels with other settings"),
    ("it crashed", _gpu_result("ORD001/reversed", [], "reversed", failed="the worker died of SIGSEGV"),
     REVERSAL, "did not run: the candidate crashed: the worker died of SIGSEGV"),
])
def test_on_a_gpu_agreeing_launches_without_a_comparable_reversed_run_are_unconfirmed(why, reversed_run, reversal,
                                                                                       said) -> None:
    verdict = _ord001([_gpu_result("ORD001/runs", SAME)] + ([reversed_run] if reversed_run else []), reversal)
    assert verdict.status == "unconfirmed" and said in verdict.summary, (why, verdict.summary)
    assert "a GPU runs a launch's programs in nearly the same order every time" in verdict.summary


def test_on_a_gpu_a_read_of_another_programs_output_shows_in_reverse_order() -> None:
    """ORD002: four poisons in launch order agree; reversed, two poisons do not, while one poison
    twice agrees: fresh memory's contents did it."""
    from kanalyze.dynamic.gates.base import GateContext
    from kanalyze.dynamic.gates.ord002_repeated_runs import RepeatedRuns

    ctx = GateContext(None, {"N": 4}, "cuda", reversal=REVERSAL)
    launch_order = [_gpu_result("ORD002/poisoned-runs", SAME[:4]), _gpu_result("ORD002/same-poison", SAME[:4])]
    unwritten = _gpu_result("ORD002/reversed", [[1.0, 2.0, 3.0, 4.0], [1.0, -3e38, 3.0, 4.0]], "reversed")
    control = _gpu_result("ORD002/reversed/same-poison", SAME[:2], "reversed")
    verdict = RepeatedRuns().judge(ctx, launch_order + [unwritten, control])
    assert verdict.status == "confirmed" and "with its programs in reverse order (tl.program_id(0) → " \
        "(tl.num_programs(0) - 1 - tl.program_id(0)), line 13)" in verdict.summary
    assert "fresh memory's contents did it" in verdict.summary
    clean = RepeatedRuns().judge(ctx, launch_order + [_gpu_result("ORD002/reversed", SAME[:2], "reversed"), control])
    assert clean.status == "refuted" and "so did the candidate with its programs in reverse order" in clean.summary


def test_on_a_gpu_bits_that_change_with_one_poison_too_are_not_fresh_memorys() -> None:
    """ORD002 on a GPU: runs with four poisons differ, but so do runs with one poison for all
    (the device's order of float atomics): ORD001's, not ORD002's."""
    from kanalyze.dynamic.gates.base import GateContext
    from kanalyze.dynamic.gates.ord002_repeated_runs import RepeatedRuns

    varying = [[1.0, 2.0, 3.0, 4.0], [1.0, 2.0000002, 3.0, 4.0]] * 2
    verdict = RepeatedRuns().judge(GateContext(None, {"N": 4}, "cuda"), [
        _gpu_result("ORD002/poisoned-runs", varying), _gpu_result("ORD002/same-poison", varying)])
    assert verdict.status == "unconfirmed" and "runs with one poison for all differ as well" in verdict.summary


def _unrun(case_id: str, variant: str):
    """A case that has not run (yet, or at all): no candidate outcome."""
    result = _gpu_result(case_id, SAME[:1], variant)
    result.candidate = None
    return result


def test_on_a_gpu_the_control_runs_only_where_the_reversed_run_differs() -> None:
    """The control tells the order's bits from a new process's; where the reversed run agreed with
    the launches (the common case: refuted), or the launches differed already, its worker's case is
    not run, and the verdict without it is the one the gate gives."""
    from kanalyze.dynamic.gates.base import GateContext
    from kanalyze.dynamic.gates.ord001_permuted_order import PermutedOrder

    gate, ctx = PermutedOrder(), GateContext(None, {"N": 4}, "cuda", reversal=REVERSAL)
    launches, control = _gpu_result("ORD001/runs", SAME), _unrun("ORD001/control", "control")
    agreed = [launches, _gpu_result("ORD001/reversed", SAME[:1], "reversed"), control]
    assert "refuted without it" in gate.unneeded(ctx, control.case, agreed)
    assert _ord001(agreed).status == "refuted"                 # the final verdict, the control unrun
    differed = [_gpu_result("ORD001/runs", SAME[:5] + OTHER_BITS * 5), _gpu_result("ORD001/reversed", SAME[:1],
                                                                                   "reversed"), control]
    assert "confirmed without it" in gate.unneeded(ctx, control.case, differed)
    # Where the reversed run differs, only the control can say whether the order did it.
    reversed_other = [launches, _gpu_result("ORD001/reversed", OTHER_BITS, "reversed"), control]
    assert gate.unneeded(ctx, control.case, reversed_other) is None
    # Before the launches and the reversed run have both run, nothing is decided: it runs.
    assert gate.unneeded(ctx, control.case, [launches, _unrun("ORD001/reversed", "reversed"), control]) is None
    assert gate.unneeded(ctx, control.case, [launches, control]) is None
    # Every other case runs.
    assert gate.unneeded(ctx, launches.case, agreed) is None
