"""ORD001 float-atomic-order: a float `tl.atomic_add` makes the result depend on program order."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from kanalyze.analyzer.triton.calls import keyword, string_literal
from kanalyze.analyzer.triton.constexpr_branches import never_taken
from kanalyze.analyzer.triton.dtypes import INTEGERS, DtypeFlow, describe
from kanalyze.analyzer.triton.dtype_names import LOW_PRECISION_FLOATS
from kanalyze.analyzer.triton.dtypes import UNKNOWN as UNKNOWN_DTYPE
from kanalyze.analyzer.triton.entities import JitFunction
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.program_slices import programs_own_disjoint_addresses
from kanalyze.analyzer.triton.store_races import racing_stores, shared_axes
from kanalyze.analyzer.triton.whole_numbers import holds_whole_numbers
from kanalyze.analyzer.triton.value_kinds import FLOAT, KIND_NAMES, LOADED, ValueKinds
from kanalyze.rules.base import Report, Rule, expr_text, source

ATOMIC_ADD = "triton.language.atomic_add"



class FloatAtomicOrder(Rule):
    code = "ORD001"
    name = "float-atomic-order"
    summary = "A float atomic_add, or a store programs race on, makes the result depend on program order"
    gate = "ord001-permuted-order"
    docs = """
    ## What it does
    Flags `tl.atomic_add` (also `ptr.atomic_add(...)`, the tensor-descriptor
    method and any `sem=`) of floating-point values: a float literal with a
    fraction, `tl.sum` /
    `tl.dot` / arithmetic on loaded data, a float `tl.zeros` accumulator, a cast
    to a float dtype.  Values passed into a jit helper that does the atomic are
    followed back to its call sites.  Where the value comes from `tl.load` and
    its dtype is not visible, the finding says so and the gate decides.  Not
    flagged: integer counters (`tl.atomic_add(count_ptr, 1)`, `.to(tl.int32)`,
    int `tl.zeros` / `tl.full`), adds into a tensor the wrapper allocates with an
    integer dtype (`torch.zeros(..., dtype=torch.int32)`: the value is converted
    to it), `tl.atomic_max` / `tl.atomic_min` (exact in any order), adds whose
    address is injective over the launch's programs (each element gets one add
    per launch: every grid axis with several programs enters the address whole,
    as `pid * BLOCK + tl.arange(0, BLOCK)`, `h * stride_h`, or both halves of
    `pid // H` and `pid % H`, each in a dimension of its own; a kernel whose
    `if IS_VARLEN:` reads its (sequence, chunk) from a table where the `else:`
    computes them from the program ids is read on that dense path; what decides
    it is in `analyzer/triton/program_slices.py`), and adds under a constexpr test
    that no value of the constexpr reaches (the split-K branch of
    `if SPLIT_K == 1:` where every autotune config, heuristic or launch sets
    `SPLIT_K` to 1).

    Also flags a `tl.store` whose value depends on a program axis
    (`tl.program_id(a)`) while its address and mask do not: every program along
    that axis stores its own value to the same elements, and the last to write
    wins (split-K partial tiles stored instead of added).  Not flagged: stores
    under an `if` or `while`, axes an early `return` reads, axes every launch
    gives one program (`analyzer/triton/store_races.py`).

    ## Why is this bad
    Float addition is not associative: the sum depends on the order the atomics
    land in, and that order is whatever the hardware scheduler picked this time.
    Measured on an H200: a float `tl.atomic_add` reduction of 4M values gave 19
    different results in 30 runs.  Bitwise reproducibility (debugging, RL reward
    checks, regression tests) is lost, and split-K GEMMs built this way differ
    from run to run.  A store race loses every value but the last one written,
    and a GPU schedules the programs in nearly the same order on every launch:
    the result looks stable until the schedule changes.

    ## Example
    ```python
    partial = tl.sum(x, axis=0)
    tl.atomic_add(out_ptr, partial)
    ```

    ## Use instead
    Write per-program partial sums to a buffer and reduce them in a fixed order
    (a second kernel, or one program doing `tl.sum` over the buffer):
    ```python
    tl.store(partials_ptr + pid, tl.sum(x, axis=0))
    # second kernel: tl.store(out_ptr, tl.sum(tl.load(partials_ptr + offs, mask=offs < n, other=0.0)))
    ```
    Where bitwise determinism is not required, suppress with `# noqa: ORD001`.
    """

    VALID = [
        source("""
        import triton
        import triton.language as tl

        @triton.jit
        def count_positive(x_ptr, count_ptr, ticket_ptr, N, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + offs, mask=offs < N, other=0.0)
            tl.atomic_add(count_ptr, tl.sum((x > 0).to(tl.int32), axis=0))
            tl.atomic_add(ticket_ptr, 1, sem="acq_rel")
        """),
        source("""
        import triton
        import triton.language as tl

        @triton.jit
        def fold_block(x_ptr, amax_ptr, sum_ptr, N, BLOCK: tl.constexpr):
            cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + cols, mask=cols < N, other=0.0)
            tl.atomic_max(amax_ptr, tl.abs(x), mask=cols < N)   # max: exact in any order
            tl.atomic_add(sum_ptr + cols, x, mask=cols < N)     # one add per element

        def fold(x, amax, total):
            fold_block[(triton.cdiv(x.numel(), 1024),)](x, amax, total, x.numel(), BLOCK=1024)
        """),
        source("""
        import torch
        import triton
        import triton.language as tl

        @triton.jit
        def count_kernel(len_ptr, total_ptr, N, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            lens = tl.load(len_ptr + offs, mask=offs < N, other=0)
            tl.atomic_add(total_ptr, tl.sum(lens, axis=0))   # into an int32 tensor: exact

        def count(lens):
            total = torch.zeros((1,), device=lens.device, dtype=torch.int32)
            count_kernel[(triton.cdiv(lens.numel(), 256),)](lens, total, lens.numel(), BLOCK=256)
            return total
        """),
        source("""
        import triton
        import triton.language as tl

        @triton.jit
        def splitk_kernel(a_ptr, b_ptr, c_ptr, K, BLOCK: tl.constexpr, SPLIT_K: tl.constexpr):
            pid_k = tl.program_id(1)
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            acc = tl.zeros((BLOCK,), dtype=tl.float32)
            for k in range(pid_k, K, SPLIT_K):
                acc += tl.load(a_ptr + k * BLOCK + offs) * tl.load(b_ptr + k)
            if SPLIT_K == 1:
                tl.store(c_ptr + offs, acc)     # one program per tile: no race
            else:
                tl.store(c_ptr + pid_k * K + offs, acc)   # a partial of its own per pid_k
        """),
        source("""
        import triton
        import triton.language as tl

        @triton.jit
        def row_stats(x_ptr, sum_ptr, count_ptr, K, BLOCK: tl.constexpr):
            row = tl.program_id(0)
            cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + row * K + cols, mask=cols < K, other=0.0)
            tl.atomic_add(sum_ptr + row, tl.sum(x, axis=0))  # noqa: ORD001  (the data's sum: order matters)
            n = tl.sum(tl.where(cols < K, 1.0, 0.0), axis=0)
            tl.atomic_add(count_ptr + row, n)   # a count: whole numbers add exactly in any order
        """),
    ]
    INVALID = [
        source("""
        import torch
        import triton
        import triton.language as tl

        @triton.jit
        def count_kernel(x_ptr, count_ptr, N, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            n = tl.sum(tl.where(offs < N, 1.0, 0.0), axis=0)
            tl.atomic_add(count_ptr, n)   # fp16 holds whole numbers only up to 2048

        def count(x):
            out = torch.zeros((1,), device=x.device, dtype=torch.float16)
            count_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
            return out
        """),
        source("""
        import triton
        import triton.language as tl

        @triton.jit
        def sum_kernel(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + offs, mask=offs < N, other=0.0)
            tl.atomic_add(out_ptr, tl.sum(x, axis=0))
        """),
        source("""
        import triton
        import triton.language as tl

        @triton.jit
        def splitk_kernel(a_ptr, b_ptr, c_ptr, K, BLOCK: tl.constexpr, SPLIT_K: tl.constexpr):
            pid_k = tl.program_id(1)
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            acc = tl.zeros((BLOCK,), dtype=tl.float32)
            for k in range(pid_k, K, SPLIT_K):
                acc += tl.load(a_ptr + k * BLOCK + offs) * tl.load(b_ptr + k)
            tl.store(c_ptr + offs, acc)   # every pid_k stores its partial: the last one wins
        """),
        source("""
        import triton
        import triton.language as tl

        @triton.jit
        def _accumulate(ptr, value):
            tl.atomic_add(ptr, value, sem="relaxed")

        @triton.jit
        def mean_kernel(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + offs, mask=offs < N, other=0.0)
            _accumulate(out_ptr, tl.sum(x, axis=0) / N)
        """),
    ]

    def check(self, model: TritonModule) -> Iterator[Report]:
        kinds = ValueKinds(model)
        flow = DtypeFlow(model)
        for site in model.calls:
            jit = model.jit.get(site.function.name) if site.function is not None else None
            if jit is None or jit.function is not site.function:
                continue
            pointer, value = _operands(model, jit, site.node, site.qualname)
            if value is None:
                continue
            kind, why = kinds.of(jit.function, value)
            if kind not in (FLOAT, LOADED):
                continue  # an integer counter, or nothing visible: stay silent
            if pointer is not None and programs_own_disjoint_addresses(model, jit, site.node, pointer):
                continue  # each element gets one add per launch: no order to depend on
            if never_taken(model, jit, site.node):
                continue  # `else:` of `if SPLIT_K == 1:` where every config sets SPLIT_K to 1
            target = flow.pointer_element(jit.function, pointer) if pointer is not None else frozenset({UNKNOWN_DTYPE})
            if UNKNOWN_DTYPE not in target and target <= INTEGERS:
                continue  # the add is converted to the tensor's integer type: exact in any order
            if not target & LOW_PRECISION_FLOATS and holds_whole_numbers(model, jit.function, value):
                continue  # a float32 count (`tl.sum(tl.where(mask, 1.0, 0.0))`): exact, so any order
            into = describe(target) if UNKNOWN_DTYPE not in target else None
            shared = None if pointer is None else shared_axes(
                model, jit, site.node, pointer, keyword(site.node, "mask", 2 if site.qualname == ATOMIC_ADD else 1))
            yield self._report(model, jit, site.node, value, kind, why, into, shared)
        for jit in model.jit.values():
            if jit.name == jit.function.name:
                for call, racing in racing_stores(model, jit):
                    yield self._report_race(model, jit, call, racing)

    def _report_race(self, model: TritonModule, jit: JitFunction, call: cst.Call, racing: dict[int, str]) -> Report:
        text = expr_text(model, call)
        axes = " and ".join(f"grid axis {axis} (`{pid}`)" for axis, pid in racing.items())
        pid = next(iter(racing.values()))
        return self.report(
            call,
            f"`{text}`: every program along {axes} stores its own value to the same elements (the address does "
            f"not depend on `{pid}`), so the result is whichever program writes last, in an order the scheduler "
            f"picks; combine the programs' values (`tl.atomic_add`, or per-program partials reduced in a fixed "
            f"order), or keep the store to one program (`if {pid} == 0:`)",
            kernel=jit.name, expression=text, axes=sorted(racing), program_ids=list(racing.values()),
            value_kind="store race",
        )

    def _report(self, model: TritonModule, jit: JitFunction, call: cst.Call, value: cst.BaseExpression,
                kind: int, why: str, into: str | None = None, shared: list[int] | None = None) -> Report:
        text = expr_text(model, call)
        if kind == FLOAT:
            what = f"float values (from `{why}`)"
        elif into is not None:
            what = f"values derived from loaded data (`{why}`) into a {into} tensor"
            kind = FLOAT
        else:
            what = f"values derived from loaded data (`{why}`; their dtype is not visible here, float if the tensor is)"
        evidence = {"expression": text, "value": expr_text(model, value), "value_kind": KIND_NAMES[kind],
                    "source": why}
        if into is not None:
            evidence["target_dtype"] = into
        sem = keyword(call, "sem")
        if isinstance(sem, cst.SimpleString):
            evidence["sem"] = string_literal(sem) or sem.value
        if shared is not None:   # the grid axes whose programs all add to the same addresses (the gate's power)
            evidence["shared_axes"] = shared
        if jit.called_from:
            evidence["called_from"] = sorted({caller.name for caller, _ in jit.called_from})
        return self.report(
            call,
            f"`{text}` adds {what} in whatever order the programs run, so the low bits of the result "
            f"change from run to run; write per-program partial sums to a buffer and reduce them in a "
            f"fixed order (a second kernel or `tl.sum` over the buffer), or add `# noqa: ORD001` where "
            f"bitwise determinism is not required",
            kernel=jit.name, **evidence,
        )


Operands = tuple[cst.BaseExpression | None, cst.BaseExpression | None]


def _operands(model: TritonModule, jit: JitFunction, call: cst.Call, qualname: str | None) -> Operands:
    """(pointer, value) of an atomic add: `tl.atomic_add(ptr, val)`, `ptr.atomic_add(val)`,
    `desc.atomic_add([m, n], value)` (no pointer); (None, None) for any other call."""
    if qualname == ATOMIC_ADD:
        return keyword(call, "pointer", 0), keyword(call, "val", 1)
    func = call.func
    if not isinstance(func, cst.Attribute) or func.attr.value != "atomic_add":
        return None, None
    receiver = func.value
    if isinstance(receiver, cst.Name) and not model.flow(jit).defs_of(receiver.value):
        return None, None  # `mod.atomic_add(...)` on a module we cannot name: not a tensor method
    positional = [a for a in call.args if a.keyword is None and not a.star]
    if positional and isinstance(positional[0].value, (cst.List, cst.Tuple)):
        return None, keyword(call, "value", 1)  # tensor descriptor: (offsets, value)
    return receiver, keyword(call, "val", 0)
