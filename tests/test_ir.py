"""The IR stage's parts that need no compiler: PTX/TTIR/SASS/ptxas parsing, the
scratch module, launch reading, settings and targets."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from kanalyze.analyzer.ir.mlir import parse_dots
from kanalyze.analyzer.ir.plan import plan_file, small_int
from kanalyze.analyzer.ir.ptx import parse_ptx
from kanalyze.analyzer.ir.resources import parse_ptxas_log
from kanalyze.analyzer.ir.sass import compact, parse_compact
from kanalyze.analyzer.ir.scan import Scanner, mma_types
from kanalyze.analyzer.ir.settings import IRSettings, SettingsError, load_settings
from kanalyze.analyzer.ir.targets import Target, TargetError, parse_targets
from kanalyze.analyzer.triton.model import TritonModule

USER = "/scratch/src/k.py"

PTX = textwrap.dedent("""\
    .visible .entry k(
    \t.param .u64 k_param_0
    )
    .reqntid 128
    {
    \t.loc\t1 24 26
    \tmov.u32 \t%r8, %tid.x;
    \t.loc\t2 314 12, function_name $L__info_string0, inlined_at 1 24 26
    \tshfl.sync.bfly.b32 \t%r11, %r1, 16, 31, -1;
    \t.loc\t2 287 12, function_name $L__info_string0, inlined_at 2 314 12
    \tadd.f32 \t%r12, %r1, %r11;
    \t.loc\t1 10 12, function_name $L__info_string1, inlined_at 1 22 16
    \twgmma.mma_async.sync.aligned.m64n64k16.f16.f16.f16 {%r1}, %rd1, %rd2, %p1, 1, 1, 0, 1;
    \t.loc\t1 0 0
    \tex2.approx.f32 \t%r3, %r2;
    \t.loc\t1 30 5
    \t@%p2 atom.global.gpu.acq_rel.add.f32 %r3, [ %rd2 + 0 ], %r4;
    \tret;
    }
    \t.file\t1 "/scratch/src/k.py"
    \t.file\t2 "/site-packages/triton/language/standard.py"
    """)


def test_ptx_rows_follow_inlining_to_the_user_file() -> None:
    ptx = parse_ptx(PTX, lambda path: path == USER)
    by_opcode = {i.opcode: i for i in ptx.instructions}
    assert by_opcode["mov.u32"].rows == (24,)
    assert by_opcode["add.f32"].rows == (24,)          # standard.py → standard.py → user line 24
    assert by_opcode["shfl.sync.bfly.b32"].rows == (24,)
    mma = by_opcode["wgmma.mma_async.sync.aligned.m64n64k16.f16.f16.f16"]
    assert (mma.rows, mma.column) == ((10, 22), 12)    # a helper's line, then its call site
    assert by_opcode["ex2.approx.f32"].rows == ()       # line 0: merged code has no row
    assert by_opcode["atom.global.gpu.acq_rel.add.f32"].rows == (30,)
    assert ptx.functions["k"].threads == 128 and ptx.functions["k"].is_entry


def test_scanner_on_ptx_without_ttir() -> None:
    lines = [""] * 40
    lines[29] = "    tl.atomic_add(y_ptr, tl.sum(x))"
    hits = Scanner({"ptx": PTX, "module": USER}, lines).scan()
    found = {(h.code, h.row) for h in hits}
    assert ("ORD001", 30) in found and ("PRC002", 10) in found
    assert not any(h.code in ("EXC001", "EXC002") for h in hits)   # ex2.approx without fast math is normal


def test_mma_types() -> None:
    assert mma_types("wgmma.mma_async.sync.aligned.m64n64k16.f16.f16.f16") == ("f16", False)
    assert mma_types("wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32") == ("f32", True)
    assert mma_types("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") == ("f32", False)
    assert mma_types("wmma.mma.sync.aligned.row.col.m16n16k16.f16.f16") == ("f16", False)
    assert mma_types("tcgen05.mma.cta_group::1.kind::tf32") == (None, True)


TTIR = textwrap.dedent("""\
    module {
      tt.func public @k() {
        %acc_20 = tt.dot %a_11, %b_19, %acc_2, inputPrecision = tf32x3 : tensor<64x32xf32> * tensor<32x64xf32> -> tensor<64x64xf32> loc(#loc33)
        %c = tt.dot %a, %b, %acc : tensor<64x32xf16> * tensor<32x64xf16> -> tensor<64x64xf16> loc(#loc40)
      }
    }
    #loc14 = loc("/scratch/src/k.py":14:16)
    #loc33 = loc("acc"(#loc14))
    #loc5 = loc("/scratch/src/k.py":10:12)
    #loc9 = loc("/scratch/src/k.py":22:16)
    #loc40 = loc(callsite(#loc5 at #loc9))
    """)


def test_ttir_dots_with_types_precision_and_inlined_rows() -> None:
    first, second = parse_dots(TTIR, lambda path: path == USER)
    assert (first.a_type, first.acc_type, first.precision, first.rows) == ("f32", "f32", "tf32x3", (14,))
    assert (second.a_type, second.acc_type, second.precision, second.rows) == ("f16", "f16", "tf32", (10, 22))


def test_ptxas_log() -> None:
    log = textwrap.dedent("""\
        ptxas info    : Compiling entry function 'mm' for 'sm_90a'
        ptxas info    : Function properties for mm
            1192 bytes stack frame, 1708 bytes spill stores, 1632 bytes spill loads
        ptxas info    : Used 255 registers, used 1 barriers, 48 bytes smem, 400 bytes cmem[0]
        """)
    r = parse_ptxas_log(log)["mm"]
    assert (r.registers, r.spill_stores, r.spill_loads, r.stack_frame, r.static_shared, r.barriers) == \
        (255, 1708, 1632, 1192, 48, 1)


def test_sass_line_info_is_kept_compactly() -> None:
    sass = textwrap.dedent("""\
        \t.section\t.text.mm,"ax",@progbits
        \t//## File "/scratch/src/k.py", line 22
        \t/*0100*/                   HGMMA.64x64x16.F16 R24, gdesc[UR8].tnspB, R24 ;
        \t//## File "/site/triton/language/standard.py", line 50 inlined at "/scratch/src/k.py", line 14
        \t/*0110*/                   FMUL R4, R3.reuse, 8388608 ;
        """)
    parsed = parse_compact(compact(sass, lambda path: path == USER))
    assert [(s.function, s.rows, s.text) for s in parsed] == [
        ("mm", (22,), "HGMMA.64x64x16.F16 R24, gdesc[UR8].tnspB, R24"),
        ("mm", (14,), "FMUL R4, R3.reuse, 8388608"),
    ]


KERNEL_FILE = textwrap.dedent("""\
    import os
    import torch
    import triton
    import triton.language as tl
    from .helpers import scale_helper

    BLOCK_DEFAULT = 256
    UNUSED = os.environ["HOME"]


    @triton.jit
    def _twice(x):
        return x * 2


    @triton.autotune(configs=[triton.Config({"BLOCK": 128}, num_warps=4)], key=["n"])
    @triton.jit
    def double_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, OUT: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n)
        tl.store(y_ptr + offs, _twice(x).to(OUT), mask=offs < n)


    @triton.jit
    def uses_helper(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, scale_helper(tl.load(x_ptr + offs)))


    def run(x):
        xs, n = x.half(), x.numel()
        y = torch.empty(n, device=x.device, dtype=torch.bfloat16)
        double_kernel[(1,)](xs, y, n, OUT=tl.bfloat16)
        uses_helper[(1,)](x, n, BLOCK=BLOCK_DEFAULT)
        if n > 0:
            raise SystemExit("never run")
    """)


def _plan(text: str = KERNEL_FILE, settings: IRSettings | None = None):
    return plan_file(TritonModule.from_source("/project/k.py", text), settings or IRSettings())


def test_scratch_module_keeps_rows_and_only_what_kernels_need() -> None:
    plan = _plan()
    original, scratch = KERNEL_FILE.splitlines(), plan.scratch.splitlines()
    assert len(scratch) == len(original)
    for row, line in enumerate(scratch):
        assert line == "" or line == original[row]       # row for row, nothing moved
    assert "def double_kernel" in plan.scratch and "@triton.autotune" in plan.scratch and "def _twice" in plan.scratch
    assert "BLOCK_DEFAULT" not in plan.scratch           # a launch value is passed as text, not imported
    assert "UNUSED" not in plan.scratch and "def run" not in plan.scratch and "SystemExit" not in plan.scratch
    assert "from .helpers" not in plan.scratch            # the user's own package is never imported
    assert "relative import" in plan.missing["scale_helper"]


def test_launch_reading() -> None:
    plan = _plan()
    kernels = {k.name: k for k in plan.kernels}
    assert set(kernels) == {"double_kernel", "uses_helper"}   # `_twice` is a helper, compiled inside
    (double,) = kernels["double_kernel"].contexts
    assert double.signature == {"x_ptr": "*fp16", "y_ptr": "*bf16", "n": "i32"}
    assert double.constexprs == {"OUT": "triton.language.bfloat16"}
    assert double.label == "launch at line 33" and kernels["double_kernel"].config_rows == [16]
    (helper,) = kernels["uses_helper"].contexts
    assert helper.constexprs == {"BLOCK": "256"}               # a module constant, resolved statically
    assert helper.signature["x_ptr"] == "*fp32" and any("x_ptr" in note for note in helper.notes)


def test_unresolved_constexpr_gets_a_stated_guess() -> None:
    text = KERNEL_FILE.replace("uses_helper[(1,)](x, n, BLOCK=BLOCK_DEFAULT)",
                               "uses_helper[(1,)](x, n, BLOCK=triton.next_power_of_2(n))")
    helper = {k.name: k for k in _plan(text).kernels}["uses_helper"].contexts[0]
    assert "BLOCK" not in helper.constexprs and helper.unresolved == {"BLOCK": "triton.next_power_of_2(n)"}
    value, note = helper.guesses["BLOCK"]
    assert value == "64" and "assumed" in note and "next_power_of_2" in note


def test_settings_constexprs_reach_the_context() -> None:
    settings = load_settings({"ir": {"constexprs": {"uses_helper.BLOCK": 512, "OUT": "fp16"},
                                     "pointer-dtype": "bf16"}})
    kernels = {k.name: k for k in _plan(settings=settings).kernels}
    assert kernels["uses_helper"].contexts[0].settings_values["BLOCK"] == "512"
    assert kernels["double_kernel"].contexts[0].settings_values["OUT"] == "triton.language.float16"
    assert kernels["uses_helper"].contexts[0].signature["x_ptr"] == "*bf16"


def test_small_int_evaluates_literal_arithmetic_only() -> None:
    assert small_int("(64) * (2)") == 128
    assert small_int("2 ** 10") is None and small_int("__import__('os')") is None
    assert small_int("(1 << 50) * (1 << 50)") is None


def test_targets_and_settings_errors() -> None:
    assert [t.name for t in parse_targets(["sm_90,sm_100", "sm_90a"])] == ["sm_90", "sm_100", "sm_90a"]
    assert Target.parse("sm_100").has_tensor_memory and not Target.parse("sm_90").has_tensor_memory
    assert Target.parse("sm_90").max_shared_bytes == 227 * 1024
    with pytest.raises(TargetError):
        Target.parse("sm_91")
    assert [t.name for t in load_settings({"target": "sm_100"}).targets] == ["sm_100"]
    assert [t.name for t in load_settings({"target": ["sm_100"]}, ["sm_90"]).targets] == ["sm_90"]
    for bad in ({"ir": {"nope": 1}}, {"ir": {"timeout": 0}}, {"ir": {"pointer-dtype": "fp12"}}, {"target": "gfx90a"}):
        with pytest.raises(SettingsError):
            load_settings(bad)


def test_static_path_imports_neither_triton_nor_the_ir_stage(tmp_path) -> None:
    kernel = tmp_path / "k.py"
    kernel.write_text(KERNEL_FILE)
    code = ("import sys; from kanalyze.cli import main; main(['check', '--no-cache', '--isolated', sys.argv[1]]); "
            "bad = [m for m in sys.modules if m == 'triton' or m.startswith(('torch', 'kanalyze.analyzer.ir.stage'))]; "
            "sys.stderr.write(repr(bad)); sys.exit(3 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code, str(kernel)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_bad_ir_settings_are_a_usage_error(tmp_path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.kanalyze]\nir = { max-configs = -1 }\n')
    (tmp_path / "k.py").write_text(KERNEL_FILE)
    from kanalyze.cli import main

    assert main(["check", "--ir", str(tmp_path / "k.py")]) == 2
    assert main(["check", "--target", "sm_42", "--isolated", str(tmp_path / "k.py")]) == 2


INLINE = '''\
import torch
from torch.utils.cpp_extension import load_inline

cuda_source = """
__global__ void scale_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * 2.0f;
}
"""

ext = load_inline(name="scale_ext", cpp_sources="", cuda_sources=cuda_source, functions=[],
                  extra_cuda_cflags=["--use_fast_math"])
'''


def test_inline_cuda_units_map_rows_back_to_the_python_file() -> None:
    from kanalyze.analyzer.ir.cuda_units import cuda_units

    units = [u for u in cuda_units("/project/inline.py", INLINE) if "scale_kernel" in u.text]
    assert len(units) == 1
    unit = units[0]
    assert unit.flags == ("--use_fast_math",) and unit.fast_math
    compiled_row = unit.text.splitlines().index("    if (i < n) y[i] = x[i] * 2.0f;") + 1
    assert unit.file_row(compiled_row) == INLINE.splitlines().index("    if (i < n) y[i] = x[i] * 2.0f;") + 1


def test_inline_asm_blocks_keep_their_first_loc() -> None:
    """LLVM numbers each line of an inline-asm string from the call's line: a
    vectorized Triton atomic at line 79 gets `.loc` 79, 80, 81, 82."""
    text = textwrap.dedent("""\
        .visible .entry k()
        {
        \t// begin inline asm
        \t.loc\t1 79 5
        \tmov.u32 %r2, 0x0;
        \t.loc\t1 80 5
        \tmov.u32 %r3, 0x0;
        \t.loc\t1 82 5
        \t@%p1 atom.global.gpu.acq_rel.add.v4.f32 { %r2, %r3, %r4, %r5 }, [ %rd3 + 0 ], { %r6, %r7, %r8, %r9 };
        \t// end inline asm
        \t.loc\t1 83 1
        \tret;
        }
        \t.file\t1 "/scratch/src/k.py"
        """)
    rows = {i.opcode: i.rows for i in parse_ptx(text, lambda path: path == USER).instructions}
    assert rows["atom.global.gpu.acq_rel.add.v4.f32"] == (79,) and rows["ret"] == (83,)
