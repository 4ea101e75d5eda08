"""The dynamic pass (`--dynamic`): the gates turn flags into verdicts (kanalyze/dynamic)."""

from __future__ import annotations

from typing import Iterable

from kanalyze.analyzer.sources import discover
from kanalyze.check.static import CheckResult
from kanalyze.config import Config


def run_dynamic(paths: Iterable[str], config: Config, result: CheckResult, options, *,
                force_exclude: bool = False) -> CheckResult:
    """The dynamic pass (`--dynamic`): run the gates that the flags call for (or
    every gate) in sandboxed workers, and move each flag to confirmed / refuted /
    unconfirmed; gate-found violations join as confirmed findings.  `options` is a
    `kanalyze.dynamic.confirm.DynamicOptions`.  Only called with `--dynamic`, so
    the static path never loads torch or triton (the workers import them)."""
    from kanalyze.dynamic.confirm import confirm
    from kanalyze.rules import rules_by_code

    files = [path for path, _ in discover(paths, config.exclude, force_exclude=force_exclude, root=config.root,
                                          respect_gitignore=config.respect_gitignore)
             if path.endswith(".py")]
    names = {code: rule.name for code, rule in rules_by_code().items()}
    found = confirm(result.findings, files, options, names, notes=result.notes)
    result.findings = [f for f in found if config.selects(f.code, f.location.file)]
    return result
