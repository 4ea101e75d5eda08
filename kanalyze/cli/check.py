"""`kanalyze check`: the passes asked for, the profile, the report (output.py), the exit code;
standard input (`-`, `--stdin-filename`), `--add-noqa` (add_noqa.py) and `--fix`/`--diff` (fix.py)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from kanalyze.cli.output import open_output, output_format, render, write_report
from kanalyze.cli.parser import EXIT_CLEAN, EXIT_FINDINGS, UsageError
from kanalyze.extras import importable
from kanalyze.report.escape import printable


def _cmd_check(args: argparse.Namespace) -> int:
    from kanalyze.config import load_config

    stdin_name = _stdin_name(args)
    paths = args.paths or ["."]
    if stdin_name is None:
        missing = [p for p in paths if not os.path.exists(p)]
        if missing:
            raise UsageError(f"path not found: {', '.join(missing)}")
    fmt = output_format(args)
    config = load_config(
        [stdin_name] if stdin_name is not None else paths, config_file=args.config, select=args.select,
        ignore=args.ignore, extend_select=args.extend_select, extend_ignore=args.extend_ignore,
        isolated=args.isolated, profile=args.profile, cache_dir=args.cache_dir,
    )
    if args.respect_gitignore is not None:
        config.respect_gitignore = args.respect_gitignore
    if args.file_timeout is not None:
        config.file_timeout = args.file_timeout
    if (args.dynamic or args.gates) and config.profile == "auto":
        config.profile = "candidate"  # the gates judge every flag: none is folded away
    wants_ir = bool(args.ir or args.target or args.show_resources)
    _check_the_modes_go_together(args, stdin_name, wants_ir)
    _check_the_passes_can_run(args, paths, config, wants_ir)
    output = None if args.add_noqa else open_output(args.output_file)
    try:
        return _check(args, stdin_name, paths, config, fmt, wants_ir, output)
    finally:
        if output is not None and not output.closed:
            output.close()


def _check(args: argparse.Namespace, stdin_name: str | None, paths: list[str], config, fmt: str, wants_ir: bool,
           output) -> int:
    from kanalyze.check import run_static
    from kanalyze.profile import apply_profiles
    from kanalyze.report import Summary

    texts: dict[str, str] = {}
    if stdin_name is not None:
        result = _check_stdin(args, stdin_name, config, texts)
        if result is None:  # --force-exclude leaves it out: nothing to say, as ruff
            if args.fix and not args.diff:
                sys.stdout.buffer.write(sys.stdin.buffer.read())  # `--fix` echoes it unchanged, as ruff
            return EXIT_CLEAN
    else:
        if args.dynamic or args.gates:
            _begin_workers(args, config)
        with _progress_bar(args, "files", ticking=False) as progress:  # no thread while the pool forks
            result = run_static(paths, config, force_exclude=args.force_exclude,
                                use_cache=not args.no_cache, jobs=args.jobs, progress=progress)
        _warn_about_unknown_noqa_codes(paths, config, args.force_exclude)
    if wants_ir:
        from kanalyze.check import run_ir

        with _progress_bar(args, "compiling") as progress:
            result = run_ir(paths, config, result, targets=args.target, show_resources=args.show_resources,
                            force_exclude=args.force_exclude, use_cache=not args.no_cache, jobs=args.jobs,
                            progress=progress)
        for note in result.notes:
            if not args.quiet or not note.startswith("IR: "):
                sys.stderr.write(f"kanalyze: {note}\n")
    if args.dynamic or args.gates:
        result = _run_dynamic(args, paths, config, result)
        for note in result.notes:
            if note.startswith("containment: "):   # said once per run, whatever the format
                sys.stderr.write(f"kanalyze: {printable(note)}\n")
            elif note.startswith("gates: ") and not args.quiet:   # gates that decided nothing, unflagged
                sys.stderr.write(f"kanalyze: {printable(note[len('gates: '):])}\n")
    # The last step: a library's policy findings fold into one note per file and clause.
    findings = apply_profiles(result.findings, config, result.profiles)
    if args.fix or args.diff:
        from kanalyze.cli.fix import run_fixes

        return run_fixes(args, findings, config, fmt, result.suppressed, texts, stdin_name, output)
    if args.add_noqa:
        from kanalyze.cli.add_noqa import add_noqa

        added, warnings = add_noqa(findings)
        for warning in warnings:
            sys.stderr.write(f"kanalyze: warning: {printable(warning)}\n")
        if not args.quiet:
            sys.stderr.write(f"Added {added} noqa directive{'' if added == 1 else 's'}.\n")
        return EXIT_CLEAN  # as ruff: the findings are now suppressed, not reported
    write_report(render(fmt, findings, args, result.suppressed, texts), output, args.output_file)
    # `--show-resources` numbers within budget are information, not findings to fail on;
    # neither are flags that a gate refuted (report/summary.py).
    if Summary.of(findings).failed and not args.exit_zero:
        return EXIT_FINDINGS
    return EXIT_CLEAN


def _stdin_name(args: argparse.Namespace) -> str | None:
    """The name standard input is checked under, or None when files are checked (as ruff:
    the path `-`, or `--stdin-filename`, which wins over any other path given)."""
    if args.stdin_filename is not None:
        for path in args.paths:
            if path != "-":
                sys.stderr.write(f"kanalyze: warning: ignoring {printable(path)} in favor of standard input\n")
        return args.stdin_filename
    if "-" in args.paths:
        if args.paths != ["-"]:
            raise UsageError("`-` (standard input) cannot be checked together with other paths")
        return "-"
    return None


def _check_the_modes_go_together(args: argparse.Namespace, stdin_name: str | None, wants_ir: bool) -> None:
    elsewhere = [flag for flag, on in (("--dynamic", args.dynamic), ("--gates", args.gates), ("--ir", wants_ir)) if on]
    if args.fix or args.diff:
        from kanalyze.cli.fix import check_fix_options

        check_fix_options(args, elsewhere)
    if stdin_name is not None and (elsewhere or args.add_noqa):
        raise UsageError(f"{(elsewhere or ['--add-noqa'])[0]} needs files on disk, not standard input")
    if args.add_noqa and elsewhere:
        raise UsageError(f"--add-noqa runs the static pass alone; leave out {elsewhere[0]}")


def _check_stdin(args: argparse.Namespace, name: str, config, texts: dict[str, str]):
    """Standard input checked as the file `name`; None when `--force-exclude` leaves it out."""
    from kanalyze.analyzer.cuda.sources import is_cuda_path
    from kanalyze.analyzer.cuda.suppressions import unknown_cuda_codes
    from kanalyze.analyzer.sources import SourceText, decode_source, is_excluded
    from kanalyze.analyzer.suppressions import unknown_codes
    from kanalyze.check import run_text

    if args.force_exclude and name != "-" and is_excluded(name, config.exclude, config.root):
        return None
    data = sys.stdin.buffer.read()
    source = decode_source(name, data)
    if isinstance(source, SourceText):
        texts[name] = source.text
        for code in unknown_cuda_codes(source.text) if is_cuda_path(name) else unknown_codes(source.text):
            sys.stderr.write(f"kanalyze: warning: {printable(code.warning(name))}\n")
    return run_text(name, data, config)


def _check_the_passes_can_run(args: argparse.Namespace, paths: list[str], config, wants_ir: bool) -> None:
    """A pass that was asked for but cannot run here is a usage error that says what to
    install: a run that skipped it would look like a pass."""
    if args.dynamic or args.gates:
        missing = [module for module in ("torch", "triton") if not importable(module)]
        if missing:
            flag = "--gates" if args.gates else "--dynamic"
            raise UsageError(f"{flag} runs the gates with {' and '.join(missing)}, which "
                             f"{'is' if len(missing) == 1 else 'are'} not installed here: "
                             f'pip install "kanalyze[dynamic]" (or leave out {flag} for the static pass alone)')
    if wants_ir and not importable("triton") and _has_triton_kernels(paths, config, args.force_exclude):
        raise UsageError('--ir compiles Triton kernels with triton, which is not installed here: '
                         'pip install "kanalyze[ir]" (or leave out --ir for the static pass alone)')


def _has_triton_kernels(paths: list[str], config, force_exclude: bool) -> bool:
    """Whether a checked Python file may hold a Triton kernel (the static pass's own prefilter)."""
    from kanalyze.analyzer.cuda.sources import is_cuda_path
    from kanalyze.analyzer.sources import SourceText, discover, may_contain_triton, read_source

    for path, explicit in discover(paths, config.exclude, force_exclude=force_exclude, root=config.root,
                                   respect_gitignore=config.respect_gitignore):
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

    for path, explicit in discover(paths, config.exclude, force_exclude=force_exclude, root=config.root,
                                   respect_gitignore=config.respect_gitignore):
        source = read_source(path, explicit=explicit)
        if not isinstance(source, SourceText):
            continue
        unknown = unknown_cuda_codes(source.text) if is_cuda_path(path) else unknown_codes(source.text)
        for code in unknown:
            sys.stderr.write(f"kanalyze: warning: {code.warning(path)}\n")


def _begin_workers(args: argparse.Namespace, config) -> None:
    """Where candidates have a problem to run against, start the gates' workers' zygote now:
    its imports of torch and triton overlap the static pass instead of following it."""
    if not (args.reference or args.kernelbench or config.raw.get("harness")):
        return
    from kanalyze.dynamic.runner import resolve_mode
    from kanalyze.dynamic.sandbox.process import prestart_zygote

    try:
        prestart_zygote(resolve_mode(args.device), wait=False)
    except ValueError:   # an unknown device: said where the gates start
        pass


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
                             seconds=args.timeout,
                             witness_dir=os.path.join(config.root, witness_dir) if witness_dir else None,
                             max_numel=config.raw.get("gate-numel"))
    with _progress_bar(args, "gates") as options.progress:
        return run_dynamic(paths, config, result, options, force_exclude=args.force_exclude)


def _progress_bar(args: argparse.Namespace, label: str, *, ticking: bool = True):
    """A pass's progress bar (report/progress.py), which yields `progress(name, done, total)`:
    on a terminal only, and not with `-q`; elsewhere it yields None and draws nothing."""
    if args.quiet or not sys.stderr.isatty():
        return contextlib.nullcontext(None)
    from kanalyze.report.progress import progress_bar

    return progress_bar(label, ticking=ticking)
