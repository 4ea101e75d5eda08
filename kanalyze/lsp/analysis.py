"""One open document's text → its static findings.

The editor holds text that is not on disk (or differs from it), so the server
cannot call `run_static`; it calls `analyze_document` with the text instead.
This repeats the per-file steps of the pipeline that do not read the disk
(the binary and size checks of `read_source`, the prefilter, the analysis) in
the same order, so a document gets the same findings `kanalyze check` gives
the same file.  Select/ignore and per-file-ignores are applied by the server,
which knows the configuration; the findings here are everything the rules
report, `# noqa` already applied.

Every kind of source goes through `analyze_document`: Python (Triton kernels,
and CUDA built inline) and CUDA C++ files.  It hands the text to the
pipeline's `analyze_source`, which dispatches to the Triton and CUDA passes.

Runs inside the worker process; imports nothing of pygls.
"""

from __future__ import annotations

from kanalyze.analyzer.sources import MAX_FILE_BYTES
from kanalyze.findings import Finding, Location

PYTHON, CUDA = "python", "cuda"

_SUFFIX_KIND = {".py": PYTHON, ".pyi": PYTHON, ".cu": CUDA, ".cuh": CUDA, ".cuda": CUDA}
# Language identifiers that editors send for these files (VS Code's `cuda-cpp`).
_LANGUAGE_KIND = {"python": PYTHON, "cuda": CUDA, "cuda-cpp": CUDA}


def document_kind(path: str, language_id: str | None) -> str | None:
    """PYTHON, CUDA, or None for a document the analyzer has nothing to say about.

    The file's suffix decides where there is one; an unsaved buffer has only
    the language its editor gave it.
    """
    dot = path.rfind(".")
    suffix = path[dot:].lower() if dot > path.rfind("/") else ""
    if suffix in _SUFFIX_KIND:
        return _SUFFIX_KIND[suffix]
    return _LANGUAGE_KIND.get((language_id or "").lower())


def unreadable(path: str, reason: str, code: str = "KAN000", name: str = "parse-error") -> Finding:
    """The finding for a document that was not analyzed, at its first character."""
    return Finding(code=code, name=name, message=reason, location=Location(path, 1, 1, 1, 1),
                   evidence={"reason": reason})


def analyze_document(path: str, text: str, kind: str, proofs: dict | None = None) -> tuple[list[Finding], int]:
    """Findings for one document's text, and how many `# noqa` suppressed; `proofs`
    are the document's proof settings (check/analyze.py).

    Never raises on user input: text that cannot be analyzed gives KAN000.
    """
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_FILE_BYTES:
        return [unreadable(path, f"file too large to analyze ({size} bytes; the limit is {MAX_FILE_BYTES})")], 0
    if "\x00" in text:
        return [unreadable(path, "binary file: it contains NUL bytes, so it is not source code")], 0
    from kanalyze.check import analyze_source

    return analyze_source(path, text, CUDA if kind == CUDA else None, proofs)
