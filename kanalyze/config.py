"""`[tool.kanalyze]` in pyproject.toml, and the code selection it implies.

Keys (kebab-case, as ruff's):
    select = ["PRC", "ORD001"]          # codes or prefixes; "ALL" for everything
                                        # (the default, "DEFAULT", leaves out MEM003/MEM004, the z3 proofs)
    ignore = ["INT001"]
    extend-select = [...]  extend-ignore = [...]
    per-file-ignores = { "tests/*" = ["CMP003"] }
    exclude = ["third_party"]           # replaces nothing: added to the defaults
    extend-exclude = [...]
    profile = "library"                 # or "candidate"; default: by what each file is (check/profile.py)
    allow-tf32 = true  deterministic = false   # a library's policies, declared once
    cache-dir = ".cache/kanalyze"       # the static cache (default .kanalyze_cache beside this file)
    respect-gitignore = false           # walk what .gitignore ignores too (default true)
The file is found from the first checked path upwards.  Command-line options
override the file.  A selector that names no code (`PRC01`, `XYZ123`) is an
error wherever it is written, never a selection of nothing that passes:
`selector_problems` says what is wrong and the closest known selector.
This module imports nothing of kanalyze.
"""

from __future__ import annotations

import difflib
import fnmatch
import os
import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class ConfigError(Exception):
    """A configuration the user has to fix (exit code 2)."""


_KNOWN_KEYS = {
    "select", "ignore", "extend-select", "extend-ignore", "per-file-ignores",
    "exclude", "extend-exclude", "harness", "target", "max-numel", "max-size", "proof-rlimit", "gate-numel",
    "witness-dir", "ir",
    "profile", "allow-tf32", "deterministic", "file-timeout", "cache-dir", "respect-gitignore",
}
PROFILES = ("auto", "candidate", "library")  # check/profile.py says what each shows


@dataclass
class Config:
    root: str = "."                     # the directory of the pyproject.toml, or cwd
    path: str | None = None             # the pyproject.toml that was read
    select: list[str] = field(default_factory=lambda: ["DEFAULT"])
    ignore: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    exclude: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)
    profile: str = "auto"               # "candidate" | "library" | "auto" (by what each file is)
    allow_tf32: bool | None = None      # a library's declared policies (None: not declared)
    deterministic: bool | None = None
    file_timeout: float | None = None   # CPU seconds per file's analysis (None: the default)
    cache_dir: str | None = None        # --cache-dir, else $KANALYZE_CACHE_DIR, else `cache-dir` (None: the default)
    respect_gitignore: bool = True      # leave out what .gitignore ignores when walking a directory

    def selects(self, code: str, filename: str | None = None) -> bool:
        """Is `code` reported for `filename`?  The longest matching prefix wins,
        and on a tie `ignore` wins (as ruff resolves select/ignore)."""
        if code.startswith("KAN") and not any(code.startswith(p.upper()) for p in self.ignore):
            return True  # files kanalyze could not read are always reported (as ruff's syntax errors)
        best_select = max((_specificity(p) for p in self.select if _prefix_matches(code, p)), default=-1)
        best_ignore = max((_specificity(p) for p in self.ignore if _prefix_matches(code, p)), default=-1)
        if best_select < 0 or best_ignore >= best_select:
            return False
        if filename is not None:
            relative = _relative(filename, self.root)
            for pattern, codes in self.per_file_ignores.items():
                if _glob(relative, pattern) and any(_prefix_matches(code, c) for c in codes):
                    return False
        return True


# Clauses whose detectors cost far more than all the others together (z3
# proofs): reported when selected explicitly (`select = ["ALL"]`,
# `--extend-select MEM003`), not by the default selection.
OPT_IN = ("MEM003", "MEM004")


def _specificity(prefix: str) -> int:
    """How specific a selector is: `ALL` and `DEFAULT` least, then longer prefixes."""
    return 0 if prefix.upper() in ("ALL", "DEFAULT") else len(prefix)


def _prefix_matches(code: str, prefix: str) -> bool:
    prefix = prefix.upper()
    if prefix == "DEFAULT":
        return code not in OPT_IN
    return prefix == "ALL" or code.startswith(prefix)


# --- what a selector may name ----------------------------------------------------

SPECIAL_SELECTORS = ("ALL", "DEFAULT")
_RULE_MODULE = re.compile(r"^([a-z]{3}[0-9]{3})_\w+\.py$")   # kanalyze/rules/prc001_precision_downgrade.py


@lru_cache(maxsize=None)
def known_codes() -> tuple[str, ...]:
    """Every clause code (PRC001, ..., KAN000), sorted.

    Read from the names of the rule modules (one per clause, `kanalyze/rules/<code>_<name>.py`),
    so that checking a selector imports no rule: a cached `kanalyze check` stays fast.
    """
    rules = Path(__file__).resolve().parent / "rules"
    return tuple(sorted({m.group(1).upper() for p in rules.iterdir() if (m := _RULE_MODULE.match(p.name))}))


def known_families() -> tuple[str, ...]:
    """The three-letter families of the codes: CMP, EXC, ..., PRC, RES."""
    return tuple(sorted({code[:3] for code in known_codes()}))


def is_known_selector(selector: str) -> bool:
    """ALL, DEFAULT, or a code or a prefix of one (`PRC001`, `PRC`, `PRC00`); any case."""
    selector = selector.strip().upper()
    return selector in SPECIAL_SELECTORS or (bool(selector) and any(c.startswith(selector) for c in known_codes()))


def closest_selector(selector: str) -> str | None:
    """The known code (else family, ALL or DEFAULT) that `selector` most likely meant."""
    selector = selector.strip().upper()
    for candidates in (known_codes(), (*SPECIAL_SELECTORS, *known_families())):
        close = difflib.get_close_matches(selector, candidates, n=1)
        if close:
            return close[0]
    return None


def selector_problems(selectors: Iterable[str]) -> list[str]:
    """What is wrong with each selector that names no code, with the closest known one."""
    problems = []
    for selector in selectors:
        if is_known_selector(selector):
            continue
        if not selector.strip():
            problems.append("an empty code")
            continue
        closest = closest_selector(selector)
        hint = f"did you mean `{closest}`?" if closest else "`kanalyze rules` lists every code"
        problems.append(f"unknown code or prefix `{selector}` ({hint})")
    return problems


def _check_selectors(selectors: Iterable[str], where: str) -> None:
    problems = selector_problems(selectors)
    if problems:
        raise ConfigError(f"{where}: {'; '.join(problems)}")


def _relative(filename: str, root: str) -> str:
    try:
        return os.path.relpath(os.path.abspath(filename), os.path.abspath(root)).replace(os.sep, "/")
    except ValueError:
        return filename


def _glob(relative: str, pattern: str) -> bool:
    return fnmatch.fnmatch(relative, pattern) or fnmatch.fnmatch(os.path.basename(relative), pattern)


def find_pyproject(start: str) -> Path | None:
    """The nearest pyproject.toml with a [tool.kanalyze] table, from `start` up."""
    here = Path(start).resolve()
    if here.is_file() or not here.exists():
        here = here.parent
    for directory in (here, *here.parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            try:
                data = tomllib.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
                raise ConfigError(f"{candidate}: {exc}") from exc
            if "kanalyze" in data.get("tool", {}):
                return candidate
    return None


def _string_list(table: dict[str, Any], key: str, where: str) -> list[str]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: `{key}` must be a list of strings")
    return list(value)


def _code_list(table: dict[str, Any], key: str, where: str) -> list[str]:
    """A list of selectors, each naming a known code or prefix."""
    codes = _string_list(table, key, where)
    _check_selectors(codes, f"{where} `{key}`")
    return codes


def load_config(
    paths: Iterable[str] = (),
    *,
    config_file: str | None = None,
    select: Iterable[str] | None = None,
    ignore: Iterable[str] | None = None,
    extend_select: Iterable[str] = (),
    extend_ignore: Iterable[str] = (),
    isolated: bool = False,
    profile: str | None = None,
    cache_dir: str | None = None,
) -> Config:
    paths = list(paths)
    config = Config(root=os.getcwd())
    pyproject: Path | None = None
    if config_file:
        pyproject = Path(config_file)
        if not pyproject.is_file():
            raise ConfigError(f"config file not found: {config_file}")
    elif not isolated:
        pyproject = find_pyproject(paths[0] if paths else os.getcwd())
    if pyproject is not None:
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{pyproject}: {exc}") from exc
        table = data.get("tool", {}).get("kanalyze", {})
        where = f"{pyproject} [tool.kanalyze]"
        unknown = sorted(set(table) - _KNOWN_KEYS)
        if unknown:
            raise ConfigError(f"{where}: unknown key(s): {', '.join(unknown)}")
        config.root = str(pyproject.parent)
        config.path = str(pyproject)
        config.raw = table
        if "select" in table:
            config.select = _code_list(table, "select", where)
        config.select += _code_list(table, "extend-select", where)
        config.ignore = _code_list(table, "ignore", where) + _code_list(table, "extend-ignore", where)
        config.exclude = _string_list(table, "exclude", where) + _string_list(table, "extend-exclude", where)
        pfi = table.get("per-file-ignores", {})
        if not isinstance(pfi, dict):
            raise ConfigError(f"{where}: `per-file-ignores` must be a table of glob = [codes]")
        for pattern in pfi:
            config.per_file_ignores[pattern] = _code_list(pfi, pattern, f"{where} per-file-ignores")
        # max-size / max-numel: the ranges the MEM003 / MEM004 proofs assume; proof-rlimit:
        # the z3 resource units one file's proofs may use (KAN003 past it);
        # gate-numel: the input elements a dynamic gate's case may use.
        for key in ("max-size", "max-numel", "proof-rlimit", "gate-numel"):
            if key in table and (not isinstance(table[key], int) or isinstance(table[key], bool) or table[key] < 1):
                raise ConfigError(f"{where}: `{key}` must be a positive integer")
        if "file-timeout" in table:
            value = table["file-timeout"]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"{where}: `file-timeout` must be a positive number of seconds")
            config.file_timeout = float(value)
        if "profile" in table:
            if table["profile"] not in PROFILES:
                raise ConfigError(f"{where}: `profile` must be one of {', '.join(map(repr, PROFILES))}")
            config.profile = table["profile"]
        for key in ("allow-tf32", "deterministic", "respect-gitignore"):
            if key in table:
                if not isinstance(table[key], bool):
                    raise ConfigError(f"{where}: `{key}` must be true or false")
                setattr(config, key.replace("-", "_"), table[key])
        if "cache-dir" in table:
            if not isinstance(table["cache-dir"], str) or not table["cache-dir"]:
                raise ConfigError(f"{where}: `cache-dir` must be a path")
            config.cache_dir = os.path.join(config.root, os.path.expanduser(table["cache-dir"]))
    # As ruff's RUFF_CACHE_DIR: the environment stands for the option, above the file.
    if cache_dir or os.environ.get("KANALYZE_CACHE_DIR"):
        config.cache_dir = os.path.abspath(cache_dir or os.environ["KANALYZE_CACHE_DIR"])
    if select is not None:
        # A selection on the command line replaces the file's selection and its
        # ignores: `--select PRC001` shows PRC001 even where the file ignores it.
        config.select = list(select)
        config.ignore = []
    if ignore is not None:
        config.ignore = list(ignore)
    config.select += list(extend_select)
    config.ignore += list(extend_ignore)
    if profile is not None:
        if profile not in PROFILES:
            raise ConfigError(f"unknown profile {profile!r}: one of {', '.join(PROFILES)}")
        config.profile = profile
    if not config.select:
        # `select = []` reports nothing and passes every file: a green that means nothing.
        raise ConfigError(f"{config.path or 'the configuration'}: `select` is empty, so nothing would be "
                          "checked; name the codes to check, or leave `select` out for the default selection")
    return config
