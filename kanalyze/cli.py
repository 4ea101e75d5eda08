"""The `kanalyze` command.

    kanalyze check PATH...       (also plain `kanalyze PATH...`)
    kanalyze rules               list the clause catalog
    kanalyze explain CODE        print a clause's docs
    kanalyze lsp                 the language server for editors (stdio)
    kanalyze audit ...           audit candidate/problem pairs into a resumable journal

Exit codes, as ruff's: 0 no findings, 1 findings, 2 usage or internal error.
A finding counts when it stands (flagged or confirmed) or is unconfirmed; a
refuted flag and an informational line do not (report/summary.py).  What would
make a pass mean nothing is a usage error, never a green run: a code or prefix
that names no clause, or a pass asked for whose packages are not installed.
This module (with the LSP server) is the only place that prints.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from typing import Sequence

from kanalyze import __version__

SUBCOMMANDS = ("check", "rules", "explain", "lsp", "version", "replay", "audit")

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits with 2 too; keep ruff's wording
        raise UsageError(message)


def _codes(value: str) -> list[str]:
    return [code.strip().upper() for code in value.split(",") if code.strip()]


def _selectors(value: str) -> list[str]:
    """`--select PRC,ORD001`: codes or prefixes, each naming a known clause (or ALL, DEFAULT)."""
    from kanalyze.config import selector_problems

    codes = _codes(value)
    if not codes:
        raise argparse.ArgumentTypeError("no code given (`kanalyze rules` lists every code)")
    problems = selector_problems(codes)
    if problems:
        raise argparse.ArgumentTypeError("; ".join(problems))
    return codes


def _gates(value: str) -> str | list[str]:
    """`--gates all`, or the clauses whose gates run: codes or prefixes (`--gates PRC`),
    each naming at least one clause that has a gate."""
    from kanalyze.config import closest_selector, is_known_selector
    from kanalyze.dynamic.gates import gates_by_code  # the gates' catalog: no torch, no triton

    selectors = _codes(value)
    if "ALL" in selectors:
        return "all"
    gated = sorted(gates_by_code())
    codes: list[str] = []
    for selector in selectors:
        chosen = [code for code in gated if code.startswith(selector)]
        if not chosen:
            closest = closest_selector(selector)
            why = "has no gate" if is_known_selector(selector) else \
                f"is no code ({f'did you mean `{closest}`?' if closest else '`kanalyze rules` lists every code'})"
            raise argparse.ArgumentTypeError(f"`{selector}` {why}; the clauses with gates are {', '.join(gated)}")
        codes += [code for code in chosen if code not in codes]
    if not codes:
        raise argparse.ArgumentTypeError(f"no code given; `all`, or some of {', '.join(gated)}")
    return codes


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="kanalyze",
        description="Static-plus-dynamic analyzer for GPU kernels written in Triton and CUDA.",
        epilog="`kanalyze PATH...` is short for `kanalyze check PATH...`.",
    )
    parser.add_argument("--version", action="version", version=f"kanalyze {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    check = sub.add_parser("check", help="check files for contract violations (the default)")
    check.add_argument("paths", nargs="*", metavar="PATH", help="files or directories (default: .)")
    check.add_argument("--select", type=_selectors, help="comma-separated codes or prefixes to report (ALL for all)")
    check.add_argument("--ignore", type=_selectors, help="comma-separated codes or prefixes to leave out")
    check.add_argument("--extend-select", type=_selectors, default=[], help="add to the selection of the config file")
    check.add_argument("--extend-ignore", type=_selectors, default=[], help="add to the ignores of the config file")
    check.add_argument("--output-format", choices=("text", "json", "sarif", "github"), default=None,
                       help="report format (default: text; KANALYZE_OUTPUT_FORMAT overrides)")
    check.add_argument("-o", "--output-file", help="write the report to this file instead of stdout")
    check.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    check.add_argument("--statistics", action="store_true", help="print a count per code after the report")
    check.add_argument("--no-cache", action="store_true", help="do not read or write .kanalyze_cache")
    check.add_argument("--force-exclude", action="store_true",
                       help="apply `exclude` to paths named on the command line too (for pre-commit)")
    check.add_argument("--config", help="read [tool.kanalyze] from this pyproject.toml")
    check.add_argument("--isolated", action="store_true", help="ignore every configuration file")
    check.add_argument("--jobs", type=int, default=None, help="worker processes (default: one per core)")
    check.add_argument("-q", "--quiet", action="store_true", help="print findings only, no summary")
    check.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    check.add_argument("--ir", action="store_true",
                       help="also compile kernels ahead of time and check PTX/SASS and resource budgets "
                            "(needs triton; nvcc for CUDA)")
    check.add_argument("--target", action="append", metavar="SM",
                       help="GPU target(s) for --ir: sm_90 (default), sm_100, ...; repeat or comma-separate")
    check.add_argument("--show-resources", action="store_true",
                       help="with --ir, report every compiled kernel's registers, spills, shared memory, "
                            "threads and TMEM columns, within budget or not")
    dynamic = check.add_argument_group("dynamic gates (need torch and triton: kanalyze[dynamic])")
    dynamic.add_argument("--dynamic", action="store_true",
                         help="run the gate of each flagged clause and confirm or refute the flag with a witness")
    dynamic.add_argument("--gates", type=_gates, metavar="all|CODES",
                         help="run every gate (`all`) or these clauses' gates, flagged or not (implies --dynamic)")
    dynamic.add_argument("--reference", metavar="PROBLEM.py",
                         help="the KernelBench problem (or kanalyze contract) that the checked candidates solve")
    dynamic.add_argument("--kernelbench", metavar="DIR",
                         help="pair candidates named level1_problem19_*.py with DIR/level1/19_*.py")
    dynamic.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                         help="where gates run: cuda, or cpu through Triton's interpreter (default: auto)")
    dynamic.add_argument("--witness-dir", metavar="DIR",
                         help="where witnesses go (default: .kanalyze/witnesses beside the configuration)")
    dynamic.add_argument("--case-timeout", type=float, metavar="SECONDS",
                         help="time limit of one gate case in a worker (default: 120)")

    rules = sub.add_parser("rules", help="list every clause of the contract catalog")
    rules.add_argument("--output-format", choices=("text", "json"), default="text")

    explain = sub.add_parser("explain", help="print the documentation of a clause")
    explain.add_argument("code", help="a clause code, e.g. PRC002")

    lsp = sub.add_parser("lsp", help="run the language server over stdio (needs kanalyze[lsp])")
    lsp.add_argument("--stdio", action="store_true", help="accepted for editors that pass it (stdio is the default)")

    sub.add_parser("version", help="print the version")

    replay = sub.add_parser("replay", help="re-run a witness: exit 1 while it still fails, 0 once fixed")
    replay.add_argument("witness", metavar="WITNESS.json")
    replay.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    replay.add_argument("--trust", action="store_true",
                        help="replay without checking the witness's signature (one written on another machine "
                             "or by another user): only for a file whose origin you trust")

    from kanalyze.audit.arguments import add_audit_parser  # imports nothing else of kanalyze

    add_audit_parser(sub, _gates)
    return parser


def _normalise_argv(argv: list[str]) -> list[str]:
    """`kanalyze PATH...` → `kanalyze check PATH...` (as ruff did before subcommands)."""
    if not argv:
        return argv
    first = argv[0]
    if first in SUBCOMMANDS or first in ("-h", "--help", "--version"):
        return argv
    return ["check", *argv]


def _rule_metadata() -> list[dict]:
    from kanalyze.rules import all_rules, cuda_detector_classes, explanation

    return [{
        "code": r.code, "name": r.name, "summary": r.summary, "gate": r.gate,
        "docs": explanation(r), "help_uri": r.help_uri(),
        # static detectors in Triton source, in CUDA C++, or both
        "has_detectors": r.has_detectors or bool(cuda_detector_classes(r.code)),
    } for r in all_rules()]


def _cmd_check(args: argparse.Namespace) -> int:
    from kanalyze.check import run_static
    from kanalyze.config import load_config
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
    )
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
    findings = result.findings

    # Rule metadata imports every rule (and LibCST): only SARIF and --statistics
    # need more than the findings carry, so a warm text run stays fast.
    if fmt == "json":
        report = render_json(findings)
    elif fmt == "sarif":
        report = render_sarif(findings, _rule_metadata(), __version__)
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


def _cmd_replay(args: argparse.Namespace) -> int:
    """Exit 1 while the witness still fails, 0 once fixed; 2 (never 0) for a witness
    that cannot be replayed, among them one changed after it was written."""
    from kanalyze.dynamic.runner import Options
    from kanalyze.dynamic.witness import WitnessError, replay

    if args.trust:
        sys.stderr.write(f"kanalyze: warning: --trust: replaying {args.witness} without checking its signature; "
                         "its verdict is only as trustworthy as where the file came from\n")
    try:
        verdict = replay(args.witness, Options(mode=args.device), trust=args.trust)
    except WitnessError as exc:
        raise UsageError(str(exc)) from exc
    sys.stdout.write(f"{verdict.code} {verdict.status}: {verdict.summary}\n")
    if verdict.status == "confirmed":
        return EXIT_FINDINGS
    return EXIT_CLEAN if verdict.status == "refuted" else EXIT_ERROR


def _cmd_audit(args: argparse.Namespace) -> int:
    from kanalyze.audit.command import run_audit_command

    return run_audit_command(args, UsageError)


def _cmd_rules(args: argparse.Namespace) -> int:
    from kanalyze.config import OPT_IN

    rules = _rule_metadata()
    if args.output_format == "json":
        import json

        sys.stdout.write(json.dumps([{k: v for k, v in r.items() if k != "docs"} for r in rules], indent=2) + "\n")
        return EXIT_CLEAN
    width = max(len(r["name"]) for r in rules)
    for r in rules:
        detectors = "static+gate" if r["has_detectors"] else ("gate" if r["gate"] else "reported")
        opt_in = " (opt-in: not in the default selection)" if r["code"] in OPT_IN else ""
        sys.stdout.write(f"{r['code']}  {r['name']:<{width}}  {detectors:<11}  {r['summary']}{opt_in}\n")
    return EXIT_CLEAN


def _cmd_explain(args: argparse.Namespace) -> int:
    from kanalyze.rules import explanation, rules_by_code

    rule = rules_by_code().get(args.code.upper())
    if rule is None:
        raise UsageError(f"unknown code: {args.code} (see `kanalyze rules`)")
    sys.stdout.write(explanation(rule))
    return EXIT_CLEAN


def _cmd_lsp(args: argparse.Namespace) -> int:
    # pygls is imported here only: `kanalyze check` must not pay for it, nor need it.
    try:
        import pygls  # noqa: F401
    except ImportError:
        sys.stderr.write('kanalyze: error: the language server needs pygls: install kanalyze[lsp] '
                         '(pip install "kanalyze[lsp]")\n')
        return EXIT_ERROR
    from kanalyze.lsp.server import serve

    return serve()


def main(argv: Sequence[str] | None = None) -> int:
    argv = _normalise_argv(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return EXIT_ERROR
        if args.command == "version":
            sys.stdout.write(f"kanalyze {__version__}\n")
            return EXIT_CLEAN
        handler = {"check": _cmd_check, "rules": _cmd_rules, "explain": _cmd_explain, "lsp": _cmd_lsp,
                   "replay": _cmd_replay, "audit": _cmd_audit}[args.command]
        return handler(args)
    except UsageError as exc:
        sys.stderr.write(f"kanalyze: error: {exc}\n")
        return EXIT_ERROR
    except Exception as exc:  # configuration and internal errors: a clear line, not a traceback
        from kanalyze.config import ConfigError

        if isinstance(exc, ConfigError):
            sys.stderr.write(f"kanalyze: error: {exc}\n")
            return EXIT_ERROR
        if os.environ.get("KANALYZE_DEBUG"):
            raise
        sys.stderr.write(f"kanalyze: internal error: {type(exc).__name__}: {exc} "
                         f"(set KANALYZE_DEBUG=1 for a traceback)\n")
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
