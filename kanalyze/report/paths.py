"""How a report names files, as ruff's: relative to the working directory in what a
person reads (text, github: a terminal or an editor opens it from there), absolute
in what a program reads (json, sarif).

A file outside the working directory keeps its absolute path everywhere; `-`
(standard input without `--stdin-filename`) stays `-`.
"""

from __future__ import annotations

import dataclasses
import os

from kanalyze.findings import Finding


def absolute(path: str) -> str:
    return path if path == "-" else os.path.abspath(path)


def relative_to_cwd(path: str) -> str:
    if path == "-":
        return path
    full = os.path.abspath(path)
    try:
        relative = os.path.relpath(full, os.getcwd())
    except (ValueError, OSError):  # another drive, or a working directory that is gone
        return full
    return full if relative == os.pardir or relative.startswith(os.pardir + os.sep) else relative


def with_paths(findings: list[Finding], *, absolute_paths: bool) -> list[Finding]:
    """The findings with each file named as the report shows it."""
    name = absolute if absolute_paths else relative_to_cwd
    names: dict[str, str] = {}
    shown = []
    for f in findings:
        file = f.location.file
        if file not in names:
            names[file] = name(file)
        shown.append(dataclasses.replace(f, location=dataclasses.replace(f.location, file=names[file])))
    return shown
