"""Kernel discovery and the dataflow graph, on small sources."""

from __future__ import annotations

import textwrap

import libcst as cst

from kanalyze.analyzer.cstwalk import walk
from kanalyze.analyzer.triton.dataflow import Dataflow
from kanalyze.analyzer.triton.model import TritonModule


def model_of(code: str) -> TritonModule:
    return TritonModule.from_source("m.py", textwrap.dedent(code))


def test_decorator_forms_and_aliases() -> None:
    m = model_of("""
        import triton
        import triton.language as tl
        from triton import jit
        from triton import jit as tjit
        import triton as tr

        @triton.jit
        def a(x): pass

        @jit
        def b(x): pass

        @tjit(do_not_specialize=["n"])
        def c(x, n): pass

        @tr.jit
        def d(x): pass

        def _impl(x): pass
        e = triton.jit(_impl)

        @triton.autotune(configs=[triton.Config({"BLOCK": 128}, num_warps=4),
                                  triton.Config({"BLOCK": 256}, num_warps=8)], key=["n"])
        @triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
        @triton.jit
        def f(x, n, BLOCK: tl.constexpr, EVEN: tl.constexpr): pass

        def not_a_kernel(x): pass

        @some.other.jit
        def g(x): pass
    """)
    assert set(m.jit) == {"a", "b", "c", "d", "_impl", "e", "f"}
    assert m.jit["e"] is m.jit["_impl"]
    f = m.jit["f"]
    assert f.constexpr_names == {"BLOCK", "EVEN"}
    assert [int(c["BLOCK"].value) for c in f.autotune_configs] == [128, 256]
    assert f.heuristics == {"EVEN"}
    assert [cst.ensure_type(v, cst.Integer).value for v in f.constexpr_values("BLOCK")] == ["128", "256"]


def test_constexpr_annotation_spellings() -> None:
    m = model_of("""
        import triton
        from triton.language import constexpr
        import triton.language as tl

        @triton.jit
        def k(x, A: tl.constexpr, B: constexpr, C: "tl.constexpr", D: int = 4): pass
    """)
    assert m.jit["k"].constexpr_names == {"A", "B", "C"}


def test_launch_sites_bind_arguments_and_find_the_wrapper() -> None:
    m = model_of("""
        import torch
        import triton
        import triton.language as tl

        @triton.jit
        def helper(v):
            return v * 2

        @triton.jit
        def kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            pid = tl.program_id(0)
            offs = pid * BLOCK + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + offs, mask=offs < n)
            tl.store(out_ptr + offs, helper(x), mask=offs < n)

        class ModelNew(torch.nn.Module):
            def forward(self, x):
                out = torch.empty_like(x)
                n = x.numel()
                grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
                kernel[grid](x, out, n, BLOCK=1024, num_warps=4)
                return out
    """)
    kernel = m.jit["kernel"]
    (launch,) = kernel.launches
    assert launch.wrapper is not None and launch.wrapper.qualname == "ModelNew.forward"
    assert {k: m.module.code_for_node(v) for k, v in launch.args.items()} == \
        {"x_ptr": "x", "out_ptr": "out", "n": "n", "BLOCK": "1024"}
    assert set(launch.options) == {"num_warps"}
    assert kernel.calls_helpers == {"helper"}
    assert [f.name for f, _ in m.jit["helper"].called_from] == ["kernel"]
    assert [f.qualname for f in m.forward_path] == ["ModelNew.forward"]


def test_forward_path_follows_calls_and_skips_references() -> None:
    m = model_of("""
        import torch
        import triton

        def launch(x):
            return prepare(x)

        def prepare(x):
            return x

        def unused(x):
            return x

        class Model(torch.nn.Module):
            def forward(self, x):
                return torch.relu(x)

        class ModelNew(torch.nn.Module):
            def forward(self, x):
                return self._run(launch(x))

            def _run(self, x):
                return x
    """)
    assert {f.qualname for f in m.forward_path} == {"Model.forward", "ModelNew.forward", "ModelNew._run", "launch", "prepare"}
    from kanalyze.analyzer.triton.host import candidate_functions

    assert {f.qualname for f in candidate_functions(m)} == {"ModelNew.forward", "ModelNew._run", "launch", "prepare"}


def test_qualified_names() -> None:
    m = model_of("""
        import triton.language as tl
        import torch.nn.functional as F
        from triton.language import maximum as mx
        from torch import matmul
        def f(a, b):
            tl.dot(a, b); F.relu(a); mx(a, b); matmul(a, b); tl.math.exp(a)
    """)
    assert [c.qualname for c in m.calls] == [
        "triton.language.dot", "torch.nn.functional.relu", "triton.language.maximum",
        "torch.matmul", "triton.language.exp"]


def _flow(code: str) -> tuple[Dataflow, cst.Module]:
    module = cst.parse_module(textwrap.dedent(code))
    function = next(n for n in walk(module) if isinstance(n, cst.FunctionDef))
    return Dataflow(function), module


def test_dataflow_loop_carried_accumulator_reaches_dot() -> None:
    flow, module = _flow("""
        def k(a_ptr, K, BLOCK: tl.constexpr):
            acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float16)
            for k in range(0, K, BLOCK):
                a = tl.load(a_ptr + k)
                acc += tl.dot(a, a)
            out = acc * 2
            return out
    """)
    (zeros,) = [d for d in flow.defs_of("acc") if d.kind == "assign"]
    (accumulate,) = [d for d in flow.defs_of("acc") if d.kind == "augassign"]
    assert accumulate in flow.downstream(zeros)
    assert Dataflow.is_accumulation(accumulate) and not Dataflow.is_accumulation(zeros)
    assert flow.defs_of("out")[0] in flow.downstream(zeros)
    assert flow.param("a_ptr") in flow.upstream(accumulate.value)
    # `k` is a loop variable, not the kernel's name: it reaches `a` through the load.
    assert flow.defs_of("k")[0] in flow.upstream(flow.defs_of("a")[0].value)


def test_dataflow_literal_reaches_launch_argument() -> None:
    flow, module = _flow("""
        def wrapper(x):
            n = 4096
            m = n * 2
            block = 128
            kernel[(m // block,)](x, m, BLOCK=block)
    """)
    n = flow.defs_of("n")[0]
    call = next(c for c in walk(module) if isinstance(c, cst.Call) and isinstance(c.func, cst.Subscript))
    assert n in flow.upstream(call.args[1].value)
    assert n not in flow.upstream(call.args[2].value)


def test_dataflow_skips_nested_scopes_and_handles_unpacking() -> None:
    flow, _ = _flow("""
        def f(x):
            a, (b, *c) = x
            with open(x) as fh:
                pass
            if (y := a + 1) > 0:
                pass
            def inner():
                hidden = 1
            g = lambda z: z
    """)
    assert {d.name for d in flow.defs} == {"x", "a", "b", "c", "fh", "y", "g"}
    assert flow.defs_of("y")[0].kind == "walrus"
