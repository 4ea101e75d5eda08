"""`kanalyze check`: the passes asked for, the profile, the report, the exit code."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

from kanalyze import __version__
from kanalyze.cli.commands import rule_metadata
from kanalyze.cli.parser import EXIT_CLEAN, EXIT_FINDINGS, UsageError


def _cmd_check(args: argparse.Namespace) -> int:
    from kanalyze.check import run_static
    from kanalyze.config import load_config
    from kanalyze.profile import apply_profiles
    from kanalyze.report import Summary, render_github, render_json, render_sarif, render_statistics, render_text

    paths = args.paths or ["."]
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise UsageError(f"path not found: {', '.join(missing)}")
    fmt = args.output_format or os.environ.get("KANALYZE_OUTPUT_FORMAT") or "text"
    if fmt not in ("text", "json", "sarif", "github"):
        raise UsageError(f"unknown output format: {fmt}")
    config = load_config(
        paths, config_file=args.config, select=args.select, ignore=args.ignore,
        extend_select=args.extend_select, extend_ignore=args.extend_ignore, isolated=args.isolated,
        profile=args.profile,
    )
    if (args.dynamic or args.gates) and config.profile == "auto":
        config.profile = "candidate"  # the gates judge every flag: none is folded away
    wants_ir = bool(args.ir or args.target or args.show_resources)
    _check_the_passes_can_run(args, paths, config, wants_ir)
    result = run_static(paths, config, force_exclude=args.force_exclude,
                        use_cache=not args.no_cache, jobs=args.jobs)
    _warn_about_unknown_noqa_codes(paths, config, args.force_exclude)
    if wants_ir:
        from kanalyze.check import run_ir

        result = run_ir(paths, config, result, targets=args.target, show_resources=args.show_resources,
                        force_exclude=args.force_exclude, use_cache=not args.no_cache, jobs=args.jobs)
        for note in result.notes:
            if not args.quiet or not note.startswith("IR: "):
                sys.stderr.write(f"kanalyze: {note}\n")
    if args.dynamic or args.gates:
        result = _run_dynamic(args, paths, config, result)
    # The last step: a library's policy findings fold into one note per file and clause.
    findings = apply_profiles(result.findings, config, result.profiles)

    # Rule metadata imports every rule (and LibCST): only SARIF and --statistics
    # need more than the findings carry, so a warm text run stays fast.
    if fmt == "json":
        report = render_json(findings)
    elif fmt == "sarif":
        report = render_sarif(findings, rule_metadata(), __version__)
    elif fmt == "github":
        report = render_github(findings)
    else:
        to_tty = args.output_file is None and sys.stdout.isatty()
        color = args.color == "always" or (args.color == "auto" and to_tty and not os.environ.get("NO_COLOR"))
        # -q: each finding's line (and the dynamic pass's verdict under it), no summary
        report = render_text(findings, color=color, suppressed=result.suppressed, summary=not args.quiet)
        if args.statistics:
            report += render_statistics(findings, {f.code: f.name for f in findings})

    if args.output_file:
        with open(args.output_file, "w", encoding="utf-8") as handle:
            handle.write(report)
    else:
        sys.stdout.write(report)
    # `--show-resources` numbers within budget are information, not findings to fail on;
    # neither are flags that a gate refuted (report/summary.py).
    if Summary.of(findings).failed and not args.exit_zero:
        return EXIT_FINDINGS
    return EXIT_CLEAN


def _importable(module: str) -> bool:
    """Whether `module` is installed, without importing it (the static path never loads torch or triton)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _check_the_passes_can_run(args: argparse.Namespace, paths: list[str], config, wants_ir: bool) -> None:
    """A pass that was asked for but cannot run here is a usage error that says what to
    install: a run that skipped it would look like a pass."""
    if args.dynamic or args.gates:
        missing = [module for module in ("torch", "triton") if not _importable(module)]
        if missing:
            flag = "--gates" if args.gates else "--dynamic"
            raise UsageError(f"{flag} runs the gates with {' and '.join(missing)}, which "
                             f"{'is' if len(missing) == 1 else 'are'} not installed here: "
                             f'pip install "kanalyze[dynamic]" (or leave out {flag} for the static pass alone)')
    if wants_ir and not _importable("triton") and _has_triton_kernels(paths, config, args.force_exclude):
        raise UsageError('--ir compiles Triton kernels with triton, which is not installed here: '
                         'pip install "kanalyze[ir]" (or leave out --ir for the static pass alone)')


def _has_triton_kernels(paths: list[str], config, force_exclude: bool) -> bool:
    """Whether a checked Python file may hold a Triton kernel (the static pass's own prefilter)."""
    from kanalyze.analyzer.cuda.sources import is_cuda_path
    from kanalyze.analyzer.sources import SourceText, discover, may_contain_triton, read_source

    for path, explicit in discover(paths, config.exclude, force_exclude=force_exclude, root=config.root):
        if not is_cuda_path(path):
            source = read_source(path, explicit=explicit)
            if isinstance(source, SourceText) and may_contain_triton(source.text):
                return True
    return False


def _warn_about_unknown_noqa_codes(paths: list[str], config, force_exclude: bool) -> None:
    """A misspelt code in a `# noqa` comment suppresses nothing: say so on stderr, as ruff does, and go on."""
    from kanalyze.analyzer.cuda.sources import is_cuda_path
    from kanalyze.analyzer.cuda.suppressions import unknown_cuda_codes
    from kanalyze.analyzer.sources import SourceText, discover, read_source
    from kanalyze.analyzer.suppressions import unknown_codes

    for path, explicit in discover(paths, config.exclude, force_exclude=force_exclude, root=config.root):
        source = read_source(path, explicit=explicit)
        if not isinstance(source, SourceText):
            continue
        unknown = unknown_cuda_codes(source.text) if is_cuda_path(path) else unknown_codes(source.text)
        for code in unknown:
            sys.stderr.write(f"kanalyze: warning: {code.warning(path)}\n")


def _run_dynamic(args: argparse.Namespace, paths: list[str], config, result):
    from kanalyze.check import run_dynamic
    from kanalyze.dynamic.confirm import DynamicOptions

    for option, path in (("--reference", args.reference), ("--kernelbench", args.kernelbench)):
        if path and not os.path.exists(path):
            raise UsageError(f"{option}: path not found: {path}")
    gates = args.gates or "targeted"
    mapping = config.raw.get("harness", {})
    if not isinstance(mapping, dict):
        raise UsageError("[tool.kanalyze.harness] must be a table of \"candidate glob\" = \"problem.py\"")
    witness_dir = args.witness_dir or config.raw.get("witness-dir")
    options = DynamicOptions(gates=gates, reference=args.reference, kernelbench=args.kernelbench, mapping=mapping,
                             root=config.root, mode=args.device, jobs=args.jobs, case_seconds=args.case_timeout,
                             witness_dir=os.path.join(config.root, witness_dir) if witness_dir else None,
                             max_numel=config.raw.get("gate-numel"))
    if args.quiet or not sys.stderr.isatty():  # a progress bar on a terminal only
        return run_dynamic(paths, config, result, options, force_exclude=args.force_exclude)
    from kanalyze.report.progress import gate_progress

    with gate_progress() as options.progress:
        return run_dynamic(paths, config, result, options, force_exclude=args.force_exclude)
