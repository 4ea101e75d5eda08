"""The pipeline: files → kernel units → static findings → (gates) → report.

This is the only package that ties the analyzer and the rules together.  It
never prints; the CLI, the LSP server and the report writers do.

Static path, in order:
  1. discover files (sources.discover), honouring `exclude` and `.gitignore`;
  2. read each one safely; unreadable input becomes KAN000, never a traceback;
  3. skip files that cannot contain a kernel (text prefilter);
  4. look the file up in the content-hash cache;
  5. otherwise parse it with LibCST, build the kernel model, run every rule,
     compute positions only if something fired, apply `# noqa`;
  6. filter by select / ignore / per-file-ignores.
Step 5 runs in a process pool when there are enough files to be worth it.

The package: errors.py (KAN000/KAN001 findings), analyze.py (one file, Triton
pass and dispatch), cuda.py (the CUDA pass), static.py (many files: cache, pool,
selection), ir.py (`--ir`), dynamic.py (`--dynamic`).
"""

from kanalyze.check.analyze import (analyze_cuda_text, analyze_inline_cuda, analyze_source, analyze_text,
                                    needs_analysis)
from kanalyze.check.dynamic import run_dynamic
from kanalyze.check.errors import INTERNAL_ERROR, PARSE_ERROR, error_finding
from kanalyze.check.ir import run_ir
from kanalyze.check.static import POOL_THRESHOLD, CheckResult, run_static, run_text

__all__ = ["INTERNAL_ERROR", "PARSE_ERROR", "POOL_THRESHOLD", "CheckResult", "analyze_cuda_text",
           "analyze_inline_cuda", "analyze_source", "analyze_text", "error_finding", "needs_analysis", "run_dynamic",
           "run_ir", "run_static", "run_text"]
