"""KAN002 compile-error: the IR stage could not compile a kernel; the other kernels were still compiled."""

from kanalyze.rules.base import Rule


class CompileError(Rule):
    code = "KAN002"
    name = "compile-error"
    summary = "A kernel did not compile ahead of time (`--ir`); its IR checks are missing"
    gate = ""
    has_detectors = False
    docs = """
    ## What it does
    Reports a kernel that `kanalyze check --ir` could not compile for a target:
    a Triton compilation error, a constexpr with no value ahead of time, a
    name the kernel uses from a module the IR stage does not import, an nvcc
    error, or a compilation that ran past the timeout.  The message says why;
    the other kernels and files are still compiled and checked.

    ## Why is this bad
    The PTX/SASS checks and the resource budget of that kernel were not run.
    A Triton compilation error at the launch's own configuration also fails
    at run time.

    ## Example
    `BLOCK=triton.next_power_of_2(n)` of a runtime `n` on a constexpr whose
    name does not say it is a block size: it has no value ahead of time.

    ## Use instead
    Give the value under `[tool.kanalyze.ir] constexprs = { BLOCK = 1024 }`,
    fix the compilation error, or suppress with `# noqa: KAN002` on the
    kernel's `def` line.
    """
