"""`.gitignore` files, read as git reads them (gitignore(5)), for the directory walk.

Inside a git work tree (a `.git` directory or file in the walked directory or
above it), the walk leaves out what the repository's `.gitignore` files and
`.git/info/exclude` ignore; outside one, `.gitignore` files mean nothing, as in
git and ruff.  The subset of the format every real file uses is read exactly:
comments, escaped `\\#` and `\\!`, trailing spaces, negation `!`, directory-only
`dir/`, anchored `/x` and `a/b`, `*`, `?`, `[a-z]`, and `**` as a leading
`**/`, an inner `/**/` or a trailing `/**`.  A deeper file overrides a higher
one, and within a file the last matching pattern wins.  The walk never enters an
ignored directory, so (as in git) nothing under one can be re-included.  The
user's global excludes (`core.excludesFile`) are not read.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class _Rule:
    regex: re.Pattern
    negated: bool
    dir_only: bool


def _class(pattern: str, start: int) -> tuple[str, int] | None:
    """The regex of the bracket expression at `pattern[start] == "["`, and the index after it."""
    i = start + 1
    negated = i < len(pattern) and pattern[i] in "!^"
    if negated:
        i += 1
    body = ""
    first = True
    while i < len(pattern) and (pattern[i] != "]" or first):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            i += 1
            ch = pattern[i]
            body += re.escape(ch)
        else:
            body += "\\" + ch if ch in "\\[]^" else ch
        first = False
        i += 1
    if i >= len(pattern):
        return None  # no closing bracket: a literal `[`
    return ("[^/" + body + "]" if negated else "[" + body + "]"), i + 1


def _translate(pattern: str) -> str:
    """A gitignore glob (no leading `/`, no trailing `/`) as a regex over a relative path."""
    out, i, n = [], 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "*":
            j = i
            while j < n and pattern[j] == "*":
                j += 1
            whole_segment = (i == 0 or pattern[i - 1] == "/") and (j == n or pattern[j] == "/")
            if j - i == 2 and whole_segment:
                if j == n:
                    out.append(".*")           # `abc/**`: everything inside
                    i = j
                else:
                    out.append("(?:.*/)?")     # `**/x`, `a/**/b`: any directories, or none
                    i = j + 1
                continue
            out.append("[^/]*")
            i = j
            continue
        if ch == "?":
            out.append("[^/]")
        elif ch == "[" and (bracket := _class(pattern, i)) is not None:
            out.append(bracket[0])
            i = bracket[1]
            continue
        elif ch == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


def parse(text: str) -> list[_Rule]:
    """The rules of one `.gitignore` text, in order."""
    rules = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        stripped = line.rstrip(" ")
        if stripped != line and stripped.endswith("\\"):
            stripped += " "  # `foo\ `: an escaped trailing space stays
        line = stripped
        negated = line.startswith("!")
        if negated:
            line = line[1:]
        dir_only = line.endswith("/")
        line = line.rstrip("/") if dir_only else line
        if not line:
            continue
        anchored = "/" in line
        body = _translate(line.lstrip("/"))
        regex = body if anchored else "(?:.*/)?" + body
        try:
            rules.append(_Rule(re.compile(regex, re.DOTALL), negated, dir_only))
        except re.error:
            continue  # git ignores a pattern it cannot read, too
    return rules


class IgnoreFile:
    """The rules of one file and the directory they are relative to."""

    def __init__(self, base: str, rules: list[_Rule]) -> None:
        self.base = base
        self.prefix = len(base.rstrip(os.sep)) + 1
        self.rules = rules
        # One search over all patterns first: most paths match none of them.
        self.any = re.compile("|".join(f"(?:{r.regex.pattern})" for r in rules), re.DOTALL)
        self.any_file = re.compile("|".join(f"(?:{r.regex.pattern})" for r in rules if not r.dir_only) or "(?!)",
                                   re.DOTALL)

    @classmethod
    def read(cls, base: str, path: str) -> "IgnoreFile | None":
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                rules = parse(handle.read())
        except OSError:
            return None
        return cls(base, rules) if rules else None

    def verdict(self, path: str, is_dir: bool) -> bool | None:
        """True: ignored, False: re-included by a `!` pattern, None: no pattern matches."""
        relative = path[self.prefix:]
        if (self.any if is_dir else self.any_file).fullmatch(relative) is None:
            return None
        for rule in reversed(self.rules):
            if (is_dir or not rule.dir_only) and rule.regex.fullmatch(relative):
                return not rule.negated
        return None


class Ignores:
    """The ignore files in force in one directory of a work tree, the deepest last."""

    def __init__(self, files: tuple[IgnoreFile, ...]) -> None:
        self.files = files

    def ignored(self, path: str, is_dir: bool) -> bool:
        """`path`: absolute and normalized, inside the directory these are for."""
        for file in reversed(self.files):
            verdict = file.verdict(path, is_dir)
            if verdict is not None:
                return verdict
        return False



def enter(ignores: Ignores | None, directory: str, names: list[str]) -> Ignores | None:
    """The ignores in force in `directory` (absolute), a child of the directory where
    `ignores` are (None: outside a work tree); `names`: its entries."""
    if ".git" in names:  # a repository of its own (a submodule, or one below a plain folder)
        return _repository(directory)
    if ignores is None or ".gitignore" not in names:
        return ignores
    own = IgnoreFile.read(directory, os.path.join(directory, ".gitignore"))
    return Ignores(ignores.files + (own,)) if own else ignores


def _info_exclude(root: str) -> str | None:
    """`.git/info/exclude` of the work tree at `root` (a `.git` file names the git directory)."""
    dot_git = os.path.join(root, ".git")
    git_dir = dot_git
    if os.path.isfile(dot_git):
        try:
            with open(dot_git, encoding="utf-8") as handle:
                line = handle.readline().strip()
        except OSError:
            return None
        if not line.startswith("gitdir:"):
            return None
        git_dir = os.path.normpath(os.path.join(root, line[len("gitdir:"):].strip()))
        try:
            with open(os.path.join(git_dir, "commondir"), encoding="utf-8") as handle:
                git_dir = os.path.normpath(os.path.join(git_dir, handle.readline().strip()))
        except OSError:
            pass
    return os.path.join(git_dir, "info", "exclude")


def _repository(root: str) -> Ignores:
    files = [IgnoreFile.read(root, _info_exclude(root) or ""), IgnoreFile.read(root, os.path.join(root, ".gitignore"))]
    return Ignores(tuple(f for f in files if f is not None))


def ignores_at(directory: str) -> Ignores | None:
    """The ignores in force in `directory` (a walk's start): those of its work tree from
    the root down to it; None outside a git work tree."""
    directory = os.path.abspath(directory)
    chain = [directory]
    while not os.path.exists(os.path.join(chain[-1], ".git")):
        parent = os.path.dirname(chain[-1])
        if parent == chain[-1]:
            return None
        chain.append(parent)
    ignores = _repository(chain[-1])
    for below in reversed(chain[:-1]):
        own = IgnoreFile.read(below, os.path.join(below, ".gitignore"))
        if own is not None:
            ignores = Ignores(ignores.files + (own,))
    return ignores
