"""Where PRC001 reads a dot's or a cast's dtype from, away from the kernel: the host
function's checks and branch tests (host_checks.py), its callers in the file
(host_callers.py), the module's backend (backends.py), and whether the kernel runs at
all in a project checked whole (the project index).  The fixtures prc001_*.py show the
same shapes end to end; these pin each piece."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest

from kanalyze.analyzer.project_index import ProjectIndex
from kanalyze.analyzer.triton.backends import ascend_module, module_backend
from kanalyze.analyzer.triton.dtype_flow import DtypeFlow
from kanalyze.analyzer.triton.dtype_names import UNKNOWN
from kanalyze.analyzer.triton.host_callers import host_callers
from kanalyze.analyzer.triton.host_checks import branch_dtypes, function_checks
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.check import run_static
from kanalyze.config import load_config


def model_of(source: str, path: str = "mod.py") -> TritonModule:
    return TritonModule.from_source(path, textwrap.dedent(source))


def function(model: TritonModule, qualname: str):
    return next(f for f in model.functions if f.qualname == qualname)


def wrapper_with(check: str) -> str:
    """`def wrapper(q, k):` with `check` (lines indented relative to one another) as its first
    statements, and `return q`."""
    return "import torch\n\n\ndef wrapper(q, k):\n" + textwrap.indent(check, "    ") + "\n    return q\n"


def host_dtypes(model: TritonModule, qualname: str, name: str) -> frozenset[str]:
    """The dtypes `name` has where the function returns it (`return name`)."""
    func = function(model, qualname)
    read = next(n.value for n in model.nodes(cst.Return) if model.function_of(n) is func)
    assert isinstance(read, cst.Name) and read.value == name
    return DtypeFlow(model).host_tensor(func, read)


# -- the function's own checks ----------------------------------------------------


@pytest.mark.parametrize("check, allowed", [
    ("assert q.dtype in (torch.float16, torch.bfloat16)", {"float16", "bfloat16"}),
    ("assert q.dtype == torch.float16 and k.dtype == torch.float16", {"float16"}),
    ("assert q.dtype is torch.bfloat16, 'bf16 only'", {"bfloat16"}),
    ("if q.dtype not in [torch.float16]:\n    raise TypeError('fp16 only')", {"float16"}),
    ("if not (q.dtype == torch.float32):\n    raise TypeError('fp32 only')", {"float32"}),
    ("q_dtype = q.dtype\nassert q_dtype in (torch.float16, torch.bfloat16)", {"float16", "bfloat16"}),
    ("assert q.dtype == torch.float16 or q.dtype == torch.bfloat16", {"float16", "bfloat16"}),
    ("if q.dtype != torch.float16 and q.dtype != torch.bfloat16:\n    raise TypeError", {"float16", "bfloat16"}),
    ("if k is None:\n    raise ValueError\nelif q.dtype != torch.float16:\n    raise TypeError", {"float16"}),
    ("with torch.cuda.device(q.device):\n    assert q.dtype == torch.bfloat16", {"bfloat16"}),
    ("for t in (q, k):\n    assert t.dtype == torch.float16", {"float16"}),
    ("assert all(t.dtype == torch.float16 for t in [k, q])", {"float16"}),
])
def test_a_check_at_the_top_of_the_function_restricts_the_tensor(check: str, allowed: set[str]) -> None:
    model = model_of(wrapper_with(check))
    assert function_checks(model, function(model, "wrapper"), {})["q"] == frozenset(allowed)
    assert host_dtypes(model, "wrapper", "q") == frozenset(allowed)


@pytest.mark.parametrize("check", [
    "assert q.dtype != torch.float32",                       # excludes one dtype: allows no set for sure
    "if q.dtype == torch.float32:\n    raise TypeError",   # the same, as a guard
    "if q.dtype not in (torch.float16,):\n    q = q.half()",  # no raise: q goes on either way
    "assert q.dtype == torch.float16 or q.dtype == torch.bfloat16 or k",  # `or` holding: any side
    "assert q.dtype == torch.float16 or k.dtype == torch.float16",  # either tensor: neither for sure
    "if k is None:\n    k = q\nelif q.dtype != torch.float16:\n    raise TypeError",  # the first branch goes on
    "for t in (q, k):\n    if t is None:\n        continue\n    assert t.dtype == torch.float16",  # skipped
    "assert any(t.dtype == torch.float16 for t in (q, k))",  # some of them
])
def test_checks_that_allow_no_set_say_nothing(check: str) -> None:
    model = model_of(wrapper_with(check))
    assert "q" not in function_checks(model, function(model, "wrapper"), {})


def test_an_equality_check_carries_the_restriction_to_the_other_tensor() -> None:
    model = model_of("""
        import torch

        def wrapper(q, k, v):
            q_dtype = q.dtype
            assert q_dtype in (torch.float16, torch.bfloat16)
            assert q_dtype == k.dtype
            assert k.dtype == v.dtype
            return v
        """)
    assert host_dtypes(model, "wrapper", "v") == {"float16", "bfloat16"}


def test_a_branch_test_restricts_the_reads_inside_it() -> None:
    model = model_of("""
        import torch

        def wrapper(x):
            if x.dtype != torch.float16:
                x16 = x.half()
            else:
                x16 = x
            y = x if x.dtype == torch.bfloat16 else x.float()
            return x16
        """)
    reads = {model.module.code_for_node(model.parent(n)): n for n in model.nodes(cst.Name) if n.value == "x"
             and isinstance(model.parent(n), (cst.Assign, cst.IfExp))}
    assert branch_dtypes(model, reads["x16 = x"]) == {"float16"}
    assert branch_dtypes(model, reads["x if x.dtype == torch.bfloat16 else x.float()"]) == {"bfloat16"}
    assert host_dtypes(model, "wrapper", "x16") == {"float16"}


# -- the callers in the file ----------------------------------------------------


def test_a_parameter_takes_what_every_caller_in_the_file_passes() -> None:
    model = model_of("""
        import torch

        class Scale(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, s):
                return x

        scale = Scale.apply

        class Block:
            def run(self, h):
                return h

            def forward(self, h):
                return self.run(h.half())

        def wrapper(x, s):
            return Scale.apply(x, s)

        def test_wrapper():
            a = torch.randn(4, dtype=torch.bfloat16)
            wrapper(a, 2.0)
            scale(torch.zeros(4, dtype=torch.bfloat16), 1.0)
        """)
    assert host_dtypes(model, "Scale.forward", "x") == {"bfloat16"}  # through `apply` and the alias
    assert host_dtypes(model, "Block.run", "h") == {"float16"}       # through `self.run`
    callers = host_callers(model, function(model, "Scale.forward"), {})
    assert len(callers) == 2 and all("ctx" not in bound for _, bound, _ in callers)


def test_a_parameter_nobody_in_the_file_passes_stays_unknown() -> None:
    model = model_of("""
        import torch

        def wrapper(x):
            return x

        def forward(x):
            return wrapper(x)      # forward's own x comes from outside the file

        def test_wrapper():
            return wrapper(torch.randn(4, dtype=torch.float16))
        """)
    assert host_dtypes(model, "wrapper", "x") == {"float16", UNKNOWN}


def test_custom_fwd_cast_inputs_adds_the_autocast_dtype_to_what_callers_pass() -> None:
    # torch casts floating inputs only under autocast: outside it they arrive as passed
    model = model_of("""
        import torch
        from torch.cuda.amp import custom_fwd

        class Cast(torch.autograd.Function):
            @staticmethod
            @custom_fwd(cast_inputs=torch.float16)
            def forward(ctx, x, idx):
                return x

            @staticmethod
            def backward(ctx, g):
                return g

        class AmpCast(torch.autograd.Function):
            @staticmethod
            @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.bfloat16)
            def forward(ctx, x):
                return x

        class Passed(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, idx):
                return idx

        def test_cast():
            Cast.apply(torch.randn(4), torch.arange(4, dtype=torch.int64))
            Passed.apply(torch.randn(4), torch.arange(4, dtype=torch.int64))
        """)
    assert host_dtypes(model, "Cast.forward", "x") == {"float16", "float32"}
    assert host_dtypes(model, "AmpCast.forward", "x") == {"bfloat16", UNKNOWN}  # no caller here
    assert host_dtypes(model, "Passed.forward", "idx") == {"int64"}              # integers are never cast


def test_a_function_defined_twice_or_rebound_has_no_caller_here() -> None:
    model = model_of("""
        import torch

        def wrapper(x):
            return x

        wrapper = torch.compile(wrapper)

        def test_wrapper():
            return wrapper(torch.randn(4, dtype=torch.float16))
        """)
    assert host_callers(model, function(model, "wrapper"), {}) == []
    assert host_dtypes(model, "wrapper", "x") == {UNKNOWN}


def test_a_dtype_mapped_by_a_helper_table_is_read_from_the_table() -> None:
    model = model_of("""
        import torch
        import triton.language as tl

        def to_tl(dtype):
            table = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}
            return table.get(dtype, None)

        def wrapper(x):
            out_type = to_tl(x.dtype)
            return out_type
        """)
    func = function(model, "wrapper")
    call = next(n for n in model.nodes(cst.Call) if model.module.code_for_node(n) == "to_tl(x.dtype)")
    assert DtypeFlow(model).named(func, call) == {"float16", "bfloat16"}


# -- the backend -------------------------------------------------------------------


@pytest.mark.parametrize("path, source, ascend", [
    ("lib/ops/backends/_ascend/ops/mm.py", "import triton\n", True),
    ("fla/ops/common/backends/triton_ascend/chunk.py", "import triton\n", True),
    ("lib/npu/kernels.py", "import triton\n", True),
    ("lib/ops/mm.py", "import torch_npu\nimport triton\n", True),
    ("lib/ops/mm.py", "import torch\n\ndef f():\n    torch.npu.synchronize()\n", True),
    ("lib/ops/mm.py", "import triton\n", False),
    ("lib/ops/nputils_test/mm.py", "import triton\n", False),   # a word that only contains "npu"
    ("lib/ops/ascend_mm.py", "import triton\n", False),         # the file's own name is not a backend folder
])
def test_what_makes_a_module_an_ascend_one(path: str, source: str, ascend: bool) -> None:
    assert (ascend_module(model_of(source, path)) is not None) == ascend


@pytest.mark.parametrize("path, source, accelerator, dot_fp32", [
    # FlagGems' layout: one folder per vendor, with a leading underscore, under runtime/backend/
    ("src/flag_gems/runtime/backend/_kunlunxin/ops/attention.py", "import triton\n", "a Kunlunxin XPU", "unknown"),
    ("src/flag_gems/runtime/backend/_hygon/ops/mm.py", "import triton\n", "a Hygon DCU", "unknown"),
    ("src/flag_gems/runtime/backend/_amd/ops/mm.py", "import triton\n", "an AMD GPU", "ieee"),
    ("lib/backends/rocm/mm.py", "import triton\n", "an AMD GPU", "ieee"),       # a vendor folder in backends/
    ("lib/ops/mm.py", "import torch_mlu\nimport triton\n", "a Cambricon MLU", "unknown"),
    ("lib/ops/mm.py", "import torch\n\ndef f():\n    torch.musa.synchronize()\n", "a Moore Threads GPU", "unknown"),
    ("lib/ops/backends/_ascend/ops/mm.py", "import triton\n", "an Ascend NPU", "ieee"),
    ("src/flag_gems/runtime/backend/_nvidia/ops/mm.py", "import triton\n", None, None),
    ("home/amd/project/ops/mm.py", "import triton\n", None, None),     # a folder that only happens to say it
    ("lib/hip_utils/mm.py", "import triton\n", None, None),
    ("lib/ops/mm.py", "import triton\n", None, None),
])
def test_which_vendor_a_module_is_written_for(path: str, source: str, accelerator, dot_fp32) -> None:
    backend = module_backend(model_of(source, path))
    assert (backend and (backend.accelerator, backend.dot_fp32)) == (accelerator and (accelerator, dot_fp32))


# -- kernels that never run, in a project checked whole ----------------------------


DEAD_KERNEL = """
import torch
import triton
import triton.language as tl


@triton.jit
def spare_kernel(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    a = tl.load(a_ptr + offs[:, None] * N + offs[None, :])
    b = tl.load(b_ptr + offs[:, None] * N + offs[None, :])
    c = tl.dot(a, b)
    tl.store(c_ptr + offs[:, None] * N + offs[None, :], c)
"""

USER = """
import torch
from pkg.kernels import spare_kernel


def matmul(a, b):
    c = torch.empty_like(a)
    spare_kernel[(1,)](a, b, c, N=a.shape[0])
    return c
"""


def prc001_rows(paths: list[str], checked: str, root: Path) -> list[int]:
    files = {p: (root / p).read_text() for p in paths}
    config = load_config([str(root)], isolated=True, select=["PRC001"])
    index = ProjectIndex.build({str(root / p): text for p, text in files.items()})
    result = run_static([str(root / checked)], config, use_cache=False, jobs=1, index=index)
    return [f.location.row for f in result.findings if f.code == "PRC001"]


LIVE_KERNEL = """

@triton.jit
def copy_kernel(x_ptr, y_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs))


def copy(x):
    y = torch.empty_like(x)
    copy_kernel[(1,)](x, y, N=x.numel())
    return y
"""


def test_a_kernel_its_launching_module_leaves_unlaunched_is_not_reported(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "kernels.py").write_text(DEAD_KERNEL + LIVE_KERNEL)
    (tmp_path / "pkg" / "other.py").write_text("import torch\n")
    assert prc001_rows(["pkg/__init__.py", "pkg/kernels.py", "pkg/other.py"], "pkg/kernels.py", tmp_path) == []


def test_a_kernel_library_module_keeps_its_kernels_in_a_project_check(tmp_path: Path) -> None:
    # it launches none of its kernels: their callers may be outside what was checked
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "kernels.py").write_text(DEAD_KERNEL)
    (tmp_path / "pkg" / "other.py").write_text("import torch\n")
    assert prc001_rows(["pkg/__init__.py", "pkg/kernels.py", "pkg/other.py"], "pkg/kernels.py", tmp_path) == [12]


def test_a_kernel_another_checked_module_launches_is_reported(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "kernels.py").write_text(DEAD_KERNEL)
    (tmp_path / "pkg" / "ops.py").write_text(USER)
    assert prc001_rows(["pkg/__init__.py", "pkg/kernels.py", "pkg/ops.py"], "pkg/kernels.py", tmp_path) == [12]


def test_a_library_file_checked_alone_keeps_its_unlaunched_kernel(tmp_path: Path) -> None:
    (tmp_path / "kernels.py").write_text(DEAD_KERNEL)
    config = load_config([str(tmp_path)], isolated=True, select=["PRC001"])
    result = run_static([str(tmp_path / "kernels.py")], config, use_cache=False, jobs=1)
    assert [f.location.row for f in result.findings if f.code == "PRC001"] == [12]


def test_a_module_attribute_holds_what_the_class_assigns_or_appends() -> None:
    model = model_of("""
        import torch
        import torch.nn as nn

        class Half(nn.Module):
            def __init__(self, n):
                self.w = nn.Parameter(torch.randn(n, dtype=torch.float16))
                self.ws = nn.ParameterList()
                self.ws.append(torch.zeros(n, dtype=torch.bfloat16))

            def weight(self):
                w = self.w
                return w

            def first(self):
                w = self.ws[0]
                return w

            def unset(self):
                w = self.bias
                return w

        class Converted(nn.Module):
            def __init__(self, n):
                self.w = nn.Parameter(torch.randn(n, dtype=torch.float16))
                self.float()

            def weight(self):
                w = self.w
                return w
        """)
    assert host_dtypes(model, "Half.weight", "w") == {"float16"}
    assert host_dtypes(model, "Half.first", "w") == {"bfloat16"}
    assert host_dtypes(model, "Half.unset", "w") == {UNKNOWN}
    assert host_dtypes(model, "Converted.weight", "w") == {UNKNOWN}  # `self.float()` converts every parameter


def test_backward_reads_what_forward_saved() -> None:
    model = model_of("""
        import torch

        class Attn(torch.autograd.Function):
            @staticmethod
            def forward(ctx, q, k):
                ctx.save_for_backward(q.half(), k)
                return q

            @staticmethod
            def backward(ctx, do):
                q, k = ctx.saved_tensors
                return q

        class Unpacked(torch.autograd.Function):
            @staticmethod
            def forward(ctx, *tensors):
                ctx.save_for_backward(*tensors)
                return tensors[0]

            @staticmethod
            def backward(ctx, do):
                q, k = ctx.saved_tensors
                return q
        """)
    assert host_dtypes(model, "Attn.backward", "q") == {"float16"}
    assert host_dtypes(model, "Unpacked.backward", "q") == {UNKNOWN}


@pytest.mark.parametrize("added, expected", [
    ("offs[:, None] == offs[None, :]", {"float32"}),   # `A += I` as a boolean: still float32
    ("1", {"float32"}),                                # a Python number is weak
    ("tl.zeros((N, N), dtype=tl.float64)", {"float64"}),
])
def test_an_augmented_assignment_promotes_the_target_with_the_value(added: str, expected: set[str]) -> None:
    model = model_of(f"""
        import triton
        import triton.language as tl

        @triton.jit
        def k(a_ptr, o_ptr, N: tl.constexpr):
            offs = tl.arange(0, N)
            a = tl.load(a_ptr + offs[:, None] * N + offs[None, :]).to(tl.float32)
            a += {added}
            tl.store(o_ptr + offs[:, None] * N + offs[None, :], a)
    """)
    func = function(model, "k")
    store = next(site.node for site in model.calls if site.qualname == "triton.language.store")
    assert DtypeFlow(model).value(func, store.args[1].value) == expected
