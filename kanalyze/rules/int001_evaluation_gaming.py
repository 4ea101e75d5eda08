"""INT001 evaluation-gaming: the candidate must not cache results, hide work, patch or inspect the checker."""

from __future__ import annotations

import unicodedata
from typing import Iterator

import libcst as cst

from kanalyze.analyzer.cstwalk import body_nodes
from kanalyze.analyzer.names import dotted
from kanalyze.analyzer.triton.cached_results import (all_work_guarded, holds_store, producing_functions, reads_store,
                                                     stores_across_calls)
from kanalyze.analyzer.triton.calls import string_literal
from kanalyze.analyzer.triton.entities import Function
from kanalyze.analyzer.triton.host import candidate_functions
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.analyzer.triton.patches import patches
from kanalyze.rules.base import Report, Rule, expr_text, source

SIDE_STREAMS = {
    "torch.cuda.Stream": "creates a side CUDA stream", "torch.cuda.streams.Stream": "creates a side CUDA stream",
    "torch.cuda.stream": "switches to another CUDA stream", "torch.cuda.set_stream": "switches to another CUDA stream",
    "torch.cuda.StreamContext": "switches to another CUDA stream",
}
SIDE_THREADS = {f"{m}.{c}" for m, cs in (
    ("threading", "Thread Timer"), ("_thread", "start_new_thread"),
    ("concurrent.futures", "ThreadPoolExecutor ProcessPoolExecutor"),
    ("multiprocessing", "Process Pool"), ("multiprocessing.pool", "Pool ThreadPool"),
    ("torch.multiprocessing", "Process Pool spawn start_processes")) for c in cs.split()}
FRAME_READERS = {"gc.get_objects", "gc.get_referrers", "gc.get_referents", "inspect.currentframe", "inspect.stack",
                 "inspect.getouterframes", "inspect.trace", "sys._getframe", "sys._current_frames"}
FRAME_ATTRS = {"f_back", "f_locals", "f_globals"}
CACHE_DECORATORS = {"functools.lru_cache", "functools.cache"}


class EvaluationGaming(Rule):
    code = "INT001"
    name = "evaluation-gaming"
    summary = "The candidate games the evaluation: cached results, side streams or threads, patches, checker reads"
    gate = "int001-integrity-probe"
    docs = """
    ## What it does
    Flags, in the forward path, side CUDA streams (`torch.cuda.Stream`,
    `torch.cuda.stream`), threads and process pools, and results stored by one
    call and returned by a later one (`if self._cache is not None: return
    self._cache`, a global dict of outputs, `functools.lru_cache` on the forward
    path). Anywhere in the file it flags patches of torch, timing and testing
    functions (`torch.cuda.synchronize = ...`, `time.perf_counter = ...`,
    `setattr(torch, ...)`; putting the saved original back, `F.gelu = _orig_gelu`
    after `_orig_gelu = F.gelu`, is a restore and is not flagged) and reads of the checker's state (`gc.get_objects()`,
    `inspect.currentframe()`, `sys._getframe`, `f_back` / `f_locals` / `f_globals`,
    `sys.modules["__main__"]`, `import __main__`), and names spelled with
    characters Python folds to others (`ｔｌ.ｍａｘｉｍｕｍ` runs as `tl.maximum`).

    ## Why is this bad
    Each one makes the benchmark measure or compare something other than the
    kernel: work on a side stream or thread escapes the CUDA events that time the
    current stream; a cached output is returned without computing (the checker
    writes new values into the same buffers and still gets the old answer); a
    patched `synchronize` or `allclose` forges the timing or the verdict; a frame
    or gc walk can find the reference output and return it.  Python reads every
    name in its NFKC form, so a fullwidth or ligature spelling runs as the plain
    name while tools and reviewers that read the text see another name.

    ## Example
    ```python
    def forward(self, x):
        if self._out is not None:
            return self._out
        self._out = launch(x)
        return self._out
    ```

    ## Use instead
    ```python
    def forward(self, x):
        return launch(x)        # compute on every call; cache configs, not outputs
    ```
    """

    VALID = [
        source("""
        import time
        import inspect
        import torch
        import triton

        class ModelNew(torch.nn.Module):
            def __init__(self, weight):
                super().__init__()
                self.w_t = weight.t().contiguous()
                self._configs = {}

            def forward(self, x):
                stream = torch.cuda.current_stream()
                start = time.perf_counter()
                key = x.shape[1]
                if key not in self._configs:
                    self._configs[key] = 128
                out = torch.empty((x.shape[0], self.w_t.shape[1]), device=x.device)
                mm_kernel[(1,)](x, self.w_t, out, BLOCK=self._configs[key])
                return out

        params = inspect.signature(ModelNew.forward).parameters
        """),
        source("""
        import torch

        _orig_gelu = torch.nn.functional.gelu

        def restore_gelu():
            torch.nn.functional.gelu = _orig_gelu
        """),
        source("""
        import triton
        import triton.language as tl

        @triton.jit
        def scale_kernel(x_ptr, α):
            café = tl.load(x_ptr)
            tl.store(x_ptr, café * α)
        """),
    ]
    INVALID = [
        source("""
        import torch
        torch.cuda.synchronize = lambda: None
        """),
        source("""
        import triton
        import triton.language as ｔｌ

        @triton.jit
        def zero_kernel(x_ptr):
            ｔｌ.store(x_ptr, 0.0)
        """),
        source("""
        import torch
        import triton

        class ModelNew(torch.nn.Module):
            def forward(self, x):
                if self._cache is not None:
                    return self._cache
                out = torch.empty_like(x)
                k[(1,)](x, out)
                self._cache = out
                return out
        """),
        source("""
        import torch
        import triton
        import triton.language as tl

        @triton.jit
        def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

        def add(x, y):
            out = torch.empty_like(x)
            with torch.cuda.stream(torch.cuda.Stream()):
                add_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK=1024)
            return out
        """),
    ]

    def check(self, model: TritonModule) -> Iterator[Report]:
        path = candidate_functions(model)
        for function in path:
            yield from self._concurrency(model, function)
        yield from self._patches(model)
        yield from self._checker_reads(model)
        yield from self._cached_results(model, path)
        yield from self._respelled_names(model)

    # -- side streams and threads -------------------------------------------

    def _concurrency(self, model: TritonModule, function: Function) -> Iterator[Report]:
        sites = {id(c.node): c for c in model.calls_in(function)
                 if c.qualname in SIDE_STREAMS or c.qualname in SIDE_THREADS}
        for site in sites.values():
            if any(id(a) in sites for a in model.ancestors(site.node)):
                continue  # `torch.cuda.stream(torch.cuda.Stream())`: one report
            if site.qualname in SIDE_STREAMS:
                why = (f"{SIDE_STREAMS[site.qualname]}; the benchmark's CUDA events time the current stream, so "
                       f"work queued elsewhere escapes the timer and may finish after the output is read")
            else:
                why = ("runs work on another thread or process; forward can return before the work is done, "
                       "so the timer stops early and the output may be read half written")
            text = expr_text(model, site.node)
            yield self.report(site.node, f"`{text}` in `{function.qualname}` {why}; launch on the current stream "
                                         f"from the calling thread", expression=text, function=function.qualname)

    # -- monkeypatches ------------------------------------------------------

    def _patches(self, model: TritonModule) -> Iterator[Report]:
        for node, what in patches(model):
            yield self._report_patch(model, node, what)

    def _report_patch(self, model: TritonModule, node: cst.CSTNode, what: str) -> Report:
        text = expr_text(model, node)
        return self.report(node, f"`{text}` replaces `{what}` for the whole process; a benchmark that times or "
                                 f"compares through it measures the patch, not the kernel. Never patch torch, "
                                 f"timing or testing functions", expression=text, patched=what)

    # -- reading the checker's state ----------------------------------------

    def _checker_reads(self, model: TritonModule) -> Iterator[Report]:
        found: list[cst.CSTNode] = []
        for node in model.nodes(cst.Call, cst.Attribute, cst.Subscript, cst.Import):
            if isinstance(node, cst.Call) and model.call_name(node) in FRAME_READERS:
                found.append(node)
            elif isinstance(node, cst.Attribute) and node.attr.value in FRAME_ATTRS:
                found.append(node)
            elif isinstance(node, cst.Subscript) and model.qualify(node.value) == "sys.modules" \
                    and any(isinstance(e.slice, cst.Index) and string_literal(e.slice.value) == "__main__"
                            for e in node.slice):
                found.append(node)  # the checker's own module
            elif isinstance(node, cst.Import) and any(dotted(a.name) == "__main__" for a in node.names):
                found.append(node)
        ids = {id(n) for n in found}
        for node in found:
            if any(id(a) in ids for a in model.ancestors(node)):
                continue  # `inspect.currentframe().f_back.f_locals`: one report for the chain
            text = expr_text(model, node)
            yield self.report(node, f"`{text}` reads the checker's frames, heap or module, where it keeps the "
                                    f"reference inputs and outputs; a kernel must compute from its arguments only",
                              expression=text)

    # -- names spelled apart from how Python reads them -----------------------

    def _respelled_names(self, model: TritonModule) -> Iterator[Report]:
        """`ｔｌ` runs as `tl` (Python folds names to NFKC) but reads as another name."""
        for node, raw, folded in model.respelled_names():
            kind = "combining" if unicodedata.normalize("NFC", raw) == folded else "compatibility"
            yield self.report(node, f"`{raw}` is spelled with {kind} characters; Python reads it as `{folded}`: "
                                    f"write it as `{folded}`", expression=raw, reads_as=folded)

    # -- results cached across calls ----------------------------------------

    def _cached_results(self, model: TritonModule, path: list[Function]) -> Iterator[Report]:
        launching = {id(l.wrapper.node) for l in model.launches if l.wrapper is not None}
        producing = producing_functions(model, path, launching)
        for function in path:
            for decorator in function.node.decorators:
                expr = decorator.decorator
                name = model.qualify(expr.func if isinstance(expr, cst.Call) else expr)
                if name in CACHE_DECORATORS and id(function.node) in producing:
                    yield self.report(decorator, f"`@{expr_text(model, expr)}` on `{function.qualname}` returns the "
                                                 f"tensor of an earlier call with the same arguments (tensors hash by "
                                                 f"identity), so new values in the same buffers get a stale result; "
                                                 f"cache configurations, not outputs",
                                      expression=expr_text(model, expr), function=function.qualname)
        stores = stores_across_calls(model, path)
        if not stores:
            return
        by_name = {f.name for f in path}
        for function in path:
            if function.name not in ("forward", "__call__") and id(function.node) not in launching:
                continue
            guards = [n for n in body_nodes(function.node) if isinstance(n, cst.If)
                      and reads_store(model, function, n.test, stores)]
            guard_ids = {id(g) for g in guards}
            for node in body_nodes(function.node):
                if not isinstance(node, cst.Return) or node.value is None \
                        or not holds_store(model, function, node.value, stores):
                    continue
                if not any(id(a) in guard_ids for a in model.ancestors(node)) and \
                        not all_work_guarded(model, function, guards, by_name):
                    continue  # a reused output buffer the kernel rewrites on every call
                text = expr_text(model, node.value)
                yield self.report(node, f"`return {text}` in `{function.qualname}` returns a result stored by an "
                                        f"earlier call; the benchmark then times a lookup and, when the checker "
                                        f"writes new values into the same inputs, compares a stale output. Compute on "
                                        f"every call (cache configurations or prepared weights, not outputs)",
                                  expression=text, function=function.qualname)
