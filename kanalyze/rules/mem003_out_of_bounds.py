"""MEM003 out-of-bounds: a load or store can leave its tensor for some size in range."""

from __future__ import annotations

from typing import Iterator

from kanalyze.analyzer.bounds.proofs import AccessReport, BoundsAnalysis, analyze, has_launched_accesses
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.rules.base import Report, Rule, expr_text, source
from kanalyze.rules.kan003_proof_budget import budget_notes


class OutOfBounds(Rule):
    code = "MEM003"
    name = "out-of-bounds"
    summary = "A load or store can leave its tensor for some size in range (z3 counterexample)"
    gate = "mem003-bounds-run"
    docs = """
    ## What it does
    For every `tl.load`, `tl.store` and `tl.atomic_*` of a launched kernel,
    asks z3 whether some runtime size in [1, 2^20] (`max-size`), some program
    of the grid, some lane and some loop iteration make the mask let an offset
    outside `[0, numel)` of the tensor through.  The sizes, the grid and the
    extent of each tensor come from the wrapper that launches the kernel
    (`x.numel()`, `x.shape[i]`, `x.stride(i)`, `torch.empty_like(x)`,
    `triton.cdiv`, autotune configs: one proof per configuration).  The finding
    quotes the smallest counterexample; the dynamic gate reruns it under the
    interpreter's bounds checks.  Accesses the extraction does not model
    (data-dependent offsets, block pointers, tensors whose shape the wrapper
    never reads) are left unknown, never flagged.  Unmasked accesses that
    CMP003 already reports are not reported twice.

    ## Why is this bad
    Allocation granularity hides small overruns: `compute-sanitizer` did not
    report an unmasked access running 24 elements past a 1000-element tensor
    on an H200.  The kernel reads garbage or corrupts a neighbour, and only
    at sizes the benchmark does not use.

    ## Example
    ```python
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs <= n)      # lane n is let through
    ```

    ## Use instead
    ```python
    x = tl.load(x_ptr + offs, mask=offs < n)
    ```
    """

    VALID = [
        source("""
        import torch, triton
        import triton.language as tl

        @triton.jit
        def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)

        def scale(x):
            out = torch.empty_like(x)
            n = x.numel()
            scale_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
            return out
        """),
    ]
    INVALID = [
        source("""
        import torch, triton
        import triton.language as tl

        @triton.jit
        def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs <= n
            tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)

        def scale(x):
            out = torch.empty_like(x)
            n = x.numel()
            scale_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
            return out
        """),
    ]

    def check(self, model: TritonModule) -> Iterator[Report]:
        if not has_launched_accesses(model):
            return
        analysis = analyze(model)
        cmp003 = None
        for access in analysis.accesses:
            verdict = access.bounds
            if verdict is None or verdict.status != "violated":
                continue
            cmp003 = _cmp003_unmasked(model) if cmp003 is None else cmp003
            if id(access.call) in cmp003:
                continue  # CMP003 reports this access already (unmasked, or masked without the tail)
            yield self._report(model, access, verdict.counterexample, analysis)
        yield from budget_notes(analysis)  # KAN003: accesses the file's proof budget left unproved

    def _report(self, model: TritonModule, access: AccessReport, example: dict, analysis: BoundsAnalysis) -> Report:
        text = expr_text(model, access.call)
        tensor = example.get("tensor") or access.tensor or access.parameter
        verb = {"load": "reads", "store": "writes"}.get(access.kind, "updates")
        offset, extent = example["offset"], example["extent"]
        where = "before its start" if offset < 0 else f"past its end ({extent} element{'s' if extent != 1 else ''})"
        at = describe_case(example)
        fix = ("the mask lets it through: bound it by the tensor's size (`offs < n`, not `<=`; each dimension "
               "of a tile masked)" if access.masked else f"add a mask (`mask=offs < n`) to `{text}`")
        message = f"`{text}`: {at} {verb} {tensor}[{offset}] {where}; {fix}"
        return self.report(
            access.call, message, kernel=access.kernel, expression=text, access=access.kind,
            tensor=tensor, parameter=access.parameter, counterexample=example,
            assumptions=assumptions(analysis, "bounds"), configurations=access.configurations)


def describe_case(example: dict) -> str:
    """`with n_cols=1001, program 7 lane 1000` (and the loop iteration, the config)."""
    values = {**example.get("constexprs", {}), **example.get("sizes", {})}
    relevant = [k for k in example.get("depends_on", []) if k in values] or list(example.get("sizes", {}))
    sizes = ", ".join(f"{k}={values[k]}" for k in relevant)
    if not sizes:
        sizes = ", ".join(f"{name} of shape ({', '.join('?' if d is None else str(d) for d in dims)})"
                          for name, dims in example.get("shapes", {}).items())
    parts = [f"with {sizes}" if sizes else "for every size"]
    program = example.get("program") or []
    if program:
        parts.append(f"program {program[0] if len(program) == 1 else tuple(program)}")
    lane = example.get("lane") or []
    if lane:
        parts.append(f"lane {lane[0] if len(lane) == 1 else tuple(lane)}")
    loop = example.get("loop") or {}
    text = f"{parts[0]}, " + " ".join(parts[1:]) if len(parts) > 1 else parts[0]
    if loop:
        text += " at " + ", ".join(f"{k}={v}" for k, v in loop.items())
    if example.get("config") is not None:
        text += f" (autotune config {example['config']}: " + ", ".join(
            f"{k}={v}" for k, v in example.get("constexprs", {}).items()) + ")"
    return text


def assumptions(analysis: BoundsAnalysis, mode: str) -> dict:
    """What a proof or counterexample assumes, so that a user can judge or change it."""
    found = {
        "contiguous": "tensors the wrapper receives are contiguous",
        "rank": "a received tensor has the rank the wrapper's reads imply (`M, N = x.shape`: 2-D; "
                "only `x.numel()`: 1-D)",
    }
    if mode == "bounds":
        found["sizes"] = f"every runtime size in [1, {analysis.max_size}] (`max-size`)"
        found["arithmetic"] = "exact integers (int32 wrap-around is MEM004's question)"
    else:
        found["numel"] = f"every tensor of at most {analysis.max_numel} elements (`max-numel`)"
    if analysis.truncated:
        found["configs"] = "; ".join(analysis.truncated)
    return found


def _cmp003_unmasked(model: TritonModule) -> set[int]:
    """Ids of the unmasked and partly masked accesses CMP003 reports (its own detector, run on demand)."""
    try:
        from kanalyze.analyzer.triton.shapes import pointer_params, runtime_params
        from kanalyze.rules.cmp003_shape_specialized import ShapeSpecialized
    except ImportError:
        return set()
    rule, found = ShapeSpecialized(), set()
    try:
        for jit in model.jit.values():
            if jit.name == jit.function.name:
                pointers = pointer_params(model, jit)
                runtime = runtime_params(model, jit, pointers)
                found |= {id(r.node) for r in (*rule.unmasked_accesses(model, jit, pointers, runtime),
                                                  *rule.partly_masked_accesses(model, jit, runtime))}
    except Exception:  # a change in CMP003 must not break this rule: report both then
        return set()
    return found
