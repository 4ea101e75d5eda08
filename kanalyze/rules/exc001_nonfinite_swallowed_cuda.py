"""EXC001 in CUDA C++: max/min that drop NaN, NaN tests that replace values, fast-math flags."""

from __future__ import annotations

import re
from typing import Iterator

import tree_sitter as ts

from kanalyze.analyzer.cuda.entities import CudaFunction
from kanalyze.analyzer.cuda.facts import LOOPS, expr_taint
from kanalyze.analyzer.cuda.model import CudaModule
from kanalyze.analyzer.cuda.nan_paths import ANY_TYPE, FLOAT_ONLY, NAN_TEST_WORDS, NanPaths
from kanalyze.analyzer.cuda.sources import Extension
from kanalyze.analyzer.cuda.types import FLOATS, type_of
from kanalyze.analyzer.cuda.values import walk
from kanalyze.analyzer.triton.host import candidate_functions
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.rules.base import Report, source
from kanalyze.rules.cuda_rule import CudaRule, kernel_name
from kanalyze.rules.exc001_nonfinite_swallowed import NonFiniteSwallowed

NAN_TESTS = re.compile(r"\b(?:isnan|isinf|__isnanf|__isinff|__isnan|__isinf|__hisnan|__hisinf|isfinite|"
                       r"std::isnan|std::isinf|std::isfinite)\s*\(")
NAN_VALUES = re.compile(r"\b(?:NAN|NAN_F|CUDART_NAN_F|CUDART_NAN|nanf?|__int_as_float\s*\(\s*0x7fc00000|"
                        r"std::numeric_limits<\w+>::quiet_NaN|INFINITY|CUDART_INF_F)\b")
FAST_MATH = {"--use_fast_math", "-use_fast_math", "-ffast-math", "--ffast-math", "-ffinite-math-only",
             "-fno-honor-nans", "-fno-honor-infinities"}
# References whose own max/min skip NaN: fmaxf there is the same contract.
NAN_SKIPPING_REFERENCE = {"torch.fmax", "torch.fmin", "torch.nanmean", "torch.nansum", "torch.nan_to_num"}


class NonFiniteSwallowedCuda(CudaRule, clause=NonFiniteSwallowed):
    docs = """
    Flags float `fmaxf`/`fminf`/`fmax`/`fmin`/`max`/`min` (and `__hmax`/`__hmin`)
    on data: in a reduction they make a NaN vanish from the result, as a ReLU
    or clamp they turn NaN into the bound, while `torch.max`, `amax`, `relu`
    and `clamp` propagate it. A call already guarded by `isnan` is not
    flagged, nor one whose Python file's reference uses `torch.fmax`/`fmin`
    (the same NaN-skipping contract), nor one whose dropped NaN reaches the
    output by another path: the max that stabilises a softmax, log-softmax,
    logsumexp or cross-entropy (`expf(x - m)` and its sum carry the NaN on,
    as in torch), the relu6 inside `x * relu6(x + 3) / 6` (NaN times anything
    is NaN). A device helper's result (a `__shfl` max reduction) is followed
    into its callers. Also flags NaN tests that replace the
    value (`isnan(v) ? 0.0f : v`, `if (isnan(v)) v = 0;`, `v != v ? ...`) and
    `--use_fast_math`, `-ffast-math` or `-ffinite-math-only` in the build
    flags, under which the compiler assumes there are no NaN or Inf.

    ```cuda
    m = fmaxf(m, x[i]);                              // flagged
    m = (x[i] > m || isnan(x[i])) ? x[i] : m;        // instead: NaN propagates
    ```
    """
    VALID = [source("""
        __global__ void row_max(const float* x, float* out, int n) {
            float m = -INFINITY;
            for (int i = 0; i < n; ++i) m = (x[i] > m || isnan(x[i])) ? x[i] : m;
            out[0] = m;
        }
        """), source("""
        __global__ void softmax_row(const float* x, float* y, int n) {
            float m = -INFINITY, sum = 0.0f;
            for (int i = 0; i < n; ++i) m = fmaxf(m, x[i]);
            for (int i = 0; i < n; ++i) sum += expf(x[i] - m);
            for (int i = 0; i < n; ++i) y[i] = expf(x[i] - m) / sum;
        }
        """)]
    INVALID = [source("""
        __global__ void row_max(const float* x, float* out, int n) {
            float m = -INFINITY;
            for (int i = 0; i < n; ++i) m = fmaxf(m, x[i]);
            out[0] = m;
        }
        """), source("""
        __global__ void clean(const float* x, float* y, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = isnan(x[i]) ? 0.0f : x[i];
        }
        """)]

    def check_cuda(self, cuda: CudaModule) -> Iterator[Report]:
        skip_max = cuda.host is not None and _reference_skips_nan(cuda.host)
        paths = NanPaths(cuda)
        for call in cuda.calls_named(*FLOAT_ONLY, *ANY_TYPE):
            function = call.function
            if function is None or not function.is_device or len(call.args) < 2:
                continue
            if call.name in FLOAT_ONLY or (call.name in ANY_TYPE and any(
                    type_of(cuda, a, function).base in FLOATS for a in call.args)):
                if skip_max or _nan_guarded(cuda, call.node, call.args, function):
                    continue
                if not any(expr_taint(cuda, a, function) & {"data", "param"} for a in call.args):
                    continue
                if not paths.reaches_output(call.node, function):
                    continue  # a softmax's max: `expf(x - m)` carries the NaN on
                yield self._max_report(cuda, call.node, call.name, call.args, function)
        tests = cuda.find_words(NAN_TEST_WORDS, "conditional_expression", "if_statement")
        tests += [n for n in cuda.find(rb"!=", "conditional_expression", "if_statement") if n not in tests]
        for node in tests:
            function = cuda.function_of(node)
            if function is None or not function.is_device:
                continue
            report = self._replacement(cuda, node, function)
            if report is not None:
                yield report

    host_reads_python = False  # check_host reads the build flags only

    def check_host(self, host: TritonModule, extensions: list[Extension]) -> Iterator[Report]:
        for ext in extensions:
            for flag in ext.flags:
                value = flag.value.split("=", 1)[-1] if flag.value.startswith("-Xcompiler") else flag.value
                if value in FAST_MATH:
                    yield self.report(flag.node, f"`{flag.value}` in `{flag.keyword}` lets the compiler assume no "
                                                 f"NaN or Inf: comparisons, `isnan` and max/min fold away, so "
                                                 f"non-finite inputs give finite results; drop the flag",
                                      flag=flag.value, keyword=flag.keyword)

    def _max_report(self, cuda: CudaModule, node: ts.Node, name: str, args: list[ts.Node],
                    function: CudaFunction) -> Report:
        text = cuda.text(node, 60)
        parent = node.parent
        target = parent.child_by_field_name("left") if parent is not None and parent.type == "assignment_expression" \
            else None
        looped = False
        current = node.parent
        while current is not None and current.id != function.node.id and not looped:
            looped = current.type in LOOPS
            current = current.parent
        # `m = fmaxf(m, x[i])` in a loop reduces; `r = fmaxf(0.0f, r)` once is a ReLU in place
        reduction = (looped and target is not None and any(cuda.text(a) == cuda.text(target) for a in args)) or \
            any("__shfl" in cuda.text(a) for a in args)
        if reduction:
            advice = (f"a NaN in the input vanishes from the reduction (`{name}` returns the other operand) while "
                      f"torch.max/amax propagate it; use `(v > m || isnan(v)) ? v : m`")
        else:
            advice = (f"it returns the other operand for a NaN input, where torch.relu/clamp/maximum return NaN; "
                      f"guard it: `isnan(v) ? v : {cuda.text(node, 40)}`")
        return self.report_at(cuda, node, f"`{text}` drops NaN: {advice}", kernel=kernel_name(cuda, function),
                              expression=text, pattern="reduction" if reduction else "elementwise")

    def _replacement(self, cuda: CudaModule, node: ts.Node, function: CudaFunction) -> Report | None:
        condition = node.child_by_field_name("condition")
        if condition is None:
            return None
        test = cuda.text(condition)
        tested = _tested(cuda, condition)
        if tested is None:
            return None
        negated = test.lstrip("(").startswith("!") or "isfinite" in test
        if node.type == "conditional_expression":
            branch = node.child_by_field_name("alternative" if negated else "consequence")
        else:
            branch = node.child_by_field_name("consequence") if not negated else node.child_by_field_name(
                "alternative")
        if branch is None:
            return None
        if _carries_nan(cuda, branch, tested):
            return None
        text = cuda.text(node if node.type == "conditional_expression" else condition, 60)
        skipped = branch.type in ("continue_statement", "break_statement", "return_statement") or \
            cuda.text(branch).strip("{} ;") in ("continue", "break", "return")
        what = "skips" if skipped else f"replaces it with `{cuda.text(branch, 30)}` for"
        return self.report_at(
            cuda, node if node.type == "conditional_expression" else condition,
            f"`{text}` {what} a non-finite `{tested}`: the output must be NaN/Inf exactly where the "
            f"reference's is; let the value through",
            kernel=kernel_name(cuda, function), expression=text)


def _tested(cuda: CudaModule, condition: ts.Node) -> str | None:
    """The expression a NaN test examines: `isnan(v)` → "v", `v != v` → "v"."""
    for node in walk(condition):
        if node.type == "call_expression" and NAN_TESTS.match(cuda.text(node)):
            arguments = node.child_by_field_name("arguments")
            if arguments is not None and arguments.named_children:
                return cuda.text(arguments.named_children[0])
        if node.type == "binary_expression" and cuda.text(node.child_by_field_name("operator")) in ("!=", "=="):
            left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
            if left is not None and right is not None and cuda.text(left) == cuda.text(right) and \
                    left.type != "number_literal":
                return cuda.text(left)
    return None


def _carries_nan(cuda: CudaModule, branch: ts.Node, tested: str) -> bool:
    text = cuda.text(branch)
    return tested in text or NAN_VALUES.search(text) is not None


def _nan_guarded(cuda: CudaModule, node: ts.Node, args: list[ts.Node], function: CudaFunction) -> bool:
    """Inside `isnan(v) ? v : fmaxf(...)` or `if (!isnan(v))`: the NaN is handled around the call."""
    names = {cuda.text(a) for a in args}
    current = node.parent
    while current is not None and current.id != function.node.id:
        if current.type in ("conditional_expression", "if_statement"):
            condition = current.child_by_field_name("condition")
            if condition is not None and (tested := _tested(cuda, condition)) is not None and \
                    any(tested in n or n in tested for n in names):
                return True
        current = current.parent
    return False


def _reference_skips_nan(host: TritonModule) -> bool:
    candidate = {id(f.node) for f in candidate_functions(host)}
    return any(site.qualname in NAN_SKIPPING_REFERENCE and (site.function is None or id(site.function.node)
                                                           not in candidate) for site in host.calls)
