"""The IR stage (`--ir`): compiled PTX/SASS and resource budgets, merged into the static findings."""

from __future__ import annotations

from typing import Callable, Iterable

from kanalyze.analyzer.sources import SourceText, discover, read_source
from kanalyze.check.analyze import needs_analysis
from kanalyze.check.static import CheckResult
from kanalyze.config import Config
from kanalyze.findings import Finding, Location


def run_ir(
    paths: Iterable[str],
    config: Config,
    result: CheckResult,
    *,
    targets: list[str] | None = None,
    show_resources: bool = False,
    force_exclude: bool = False,
    use_cache: bool = True,
    jobs: int | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> CheckResult:
    """The IR stage (`--ir`): compile every kernel ahead of time (Triton; CUDA
    through nvcc), scan PTX/SASS, check resource budgets, and merge what it
    finds into `result`, the static findings.  Only called with `--ir`, so the
    static path never loads it (nor triton).  `progress(name, done, total)`: told
    of the compile jobs as they end (analyzer/ir/stage.py)."""
    from kanalyze.analyzer.ir.artifacts import ArtifactCache
    from kanalyze.analyzer.ir.merge import failure_findings, hit_findings, merge
    from kanalyze.analyzer.ir.settings import SettingsError, load_settings
    from kanalyze.analyzer.ir.stage import analyze_ir
    from kanalyze.analyzer.suppressions import Suppressions
    from kanalyze.config import ConfigError
    from kanalyze.rules.res002_resource_budget import ResourceBudget

    try:
        settings = load_settings(config.raw, targets, show_resources)
    except SettingsError as exc:
        raise ConfigError(str(exc)) from exc
    sources: list[tuple[str, str]] = []
    for path, explicit in discover(paths, config.exclude, force_exclude=force_exclude, root=config.root,
                                   respect_gitignore=config.respect_gitignore):
        source = read_source(path, explicit=explicit)
        if isinstance(source, SourceText) and needs_analysis(path, source.text):
            sources.append((path, source.text))
    cache = ArtifactCache.open(config.root) if use_cache else ArtifactCache.disabled()
    run = analyze_ir(sources, settings, cache, workers=jobs, progress=progress)

    rules = clause_rules({"PRC001", "PRC002", "ORD001", "EXC001", "EXC002", "RES002", "KAN002"})
    names = {code: rule.name for code, rule in rules.items()}
    gates = {code: rule.gate for code, rule in rules.items()}
    budget = ResourceBudget()
    found = hit_findings(run, names, gates) + failure_findings(run, names["KAN002"])
    for file_ir in run.files:
        for kernel in file_ir.kernels:
            for report in budget.check_ir(kernel, show_resources=settings.show_resources):
                found.append(Finding(code=report.code, name=budget.name, message=report.message,
                                     location=Location(file_ir.path, report.row, 1, report.row, 1),
                                     kernel=report.kernel, evidence=report.evidence))
    found = [f for f in found if config.selects(f.code, f.location.file)]
    static, alone = merge(result.findings, found)
    texts = dict(sources)
    kept = []
    for finding in alone:
        text = texts.get(finding.location.file, "")
        rows = tuple(finding.evidence.get("rows") or (finding.location.row,))
        if Suppressions.parse(text).suppressed(finding.code, rows):
            result.suppressed += 1
            continue
        kept.append(finding)
    result.findings = sorted(static + kept, key=lambda f: f.sort_key)
    result.notes.extend(run.notes)
    result.notes.append(f"IR: {run.compiled} kernel configurations compiled, {run.from_cache} from the cache "
                        f"({', '.join(t.name for t in settings.targets)}; {run.seconds:.1f} s)")
    return result


def clause_rules(codes: set[str]) -> dict:
    """The rule classes of `codes`, importing only their modules (the IR stage's
    warm path should not pay for the whole catalog)."""
    import importlib
    import pkgutil

    import kanalyze.rules as package

    found = {}
    for info in pkgutil.iter_modules(package.__path__):
        code = info.name.split("_", 1)[0].upper()
        if code in codes and not info.name.endswith("_cuda"):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            for value in vars(module).values():
                if isinstance(value, type) and getattr(value, "code", None) == code and value.__module__ == module.__name__:
                    found[code] = value
    return found

