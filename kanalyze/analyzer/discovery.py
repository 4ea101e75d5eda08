"""Finding the files to check: the walk of the directories given, `exclude`, and `.gitignore`.

sources.py re-exports `discover` (and these constants) for its callers.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path
from typing import Iterable, Iterator

from kanalyze.analyzer.cuda.sources import CUDA_SUFFIXES
from kanalyze.analyzer.gitignore import enter, ignores_at

PYTHON_SUFFIXES = (".py", ".pyi")

# Directories nobody wants linted (the same spirit as ruff's default excludes).
DEFAULT_EXCLUDES = (
    ".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", ".mypy_cache",
    ".ruff_cache", ".pytest_cache", ".kanalyze_cache", "__pycache__",
    "node_modules", "build", "dist", "site-packages", ".eggs",
)


def _matches(path: str, patterns: Iterable[str], *, any_ancestor: bool = False) -> bool:
    """Does `path` (relative to the project root) match an exclude pattern?

    As in ruff: a pattern without a slash matches an entry's own name
    (`fixtures` excludes every directory called fixtures met while walking),
    one with a slash matches the relative path.  A walk tests each entry as it
    meets it, so a directory named on the command line is walked even when its
    own name is excluded; `any_ancestor` (for --force-exclude) tests every
    component of an explicit path instead.
    """
    normalized = path.replace(os.sep, "/")
    names = Path(path).parts if any_ancestor else Path(path).parts[-1:]
    for pattern in patterns:
        pattern = pattern.rstrip("/")
        if "/" in pattern:
            if fnmatch.fnmatch(normalized, pattern) or fnmatch.fnmatch(normalized, pattern + "/*"):
                return True
        elif any(fnmatch.fnmatch(name, pattern) for name in names):
            return True
    return False


def _relative(path: str, root: str | None) -> str:
    if root:
        try:
            return os.path.relpath(path, root)
        except ValueError:
            return path
    return path


def is_excluded(path: str, exclude: Iterable[str], root: str | None = None) -> bool:
    """Whether `--force-exclude` leaves out `path`, named explicitly (or as `--stdin-filename`)."""
    return _matches(_relative(path, root), tuple(exclude), any_ancestor=True)


def discover(
    paths: Iterable[str],
    exclude: Iterable[str] = (),
    *,
    force_exclude: bool = False,
    root: str | None = None,
    respect_gitignore: bool = False,
) -> Iterator[tuple[str, bool]]:
    """Yield `(path, explicit)` for every file to check, in a stable order.

    Directories are walked for Python and CUDA files; files named on the command line
    are checked whatever their suffix (`explicit=True`), unless `force_exclude`
    is set and they match an exclude pattern (as ruff's `--force-exclude`).
    With `respect_gitignore`, a walk inside a git work tree leaves out what its
    `.gitignore` files ignore (gitignore.py); a file named explicitly is still checked.
    """
    exclude = tuple(exclude)
    seen: set[str] = set()

    for given in paths:
        if os.path.isdir(given):
            start = os.path.abspath(given)
            ignores = {start: ignores_at(start)} if respect_gitignore else {}
            for dirpath, dirnames, filenames in os.walk(given):
                here = os.path.abspath(dirpath)
                rules = ignores.pop(here, None)
                if respect_gitignore and here != start:
                    rules = enter(rules, here, dirnames + filenames)
                dirnames[:] = sorted(
                    d for d in dirnames
                    if d not in DEFAULT_EXCLUDES and not _matches(_relative(os.path.join(dirpath, d), root), exclude)
                    and not (rules is not None and rules.ignored(os.path.join(here, d), True))
                )
                if respect_gitignore:
                    ignores.update((os.path.join(here, d), rules) for d in dirnames)
                for name in sorted(filenames):
                    if not (name.endswith(PYTHON_SUFFIXES) or name.lower().endswith(CUDA_SUFFIXES)):
                        continue
                    path = os.path.join(dirpath, name)
                    if _matches(_relative(path, root), exclude) or path in seen:
                        continue
                    if rules is not None and rules.ignored(os.path.join(here, name), False):
                        continue
                    seen.add(path)
                    yield path, False
        else:
            if force_exclude and is_excluded(given, exclude, root):
                continue
            if given not in seen:
                seen.add(given)
                yield given, True
