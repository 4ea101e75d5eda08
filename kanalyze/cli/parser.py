"""The command line's grammar: subcommands, options and their converters (no work is done here)."""

from __future__ import annotations

import argparse

from kanalyze import __version__
from kanalyze.report import FORMATS

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


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {value!r}") from None
    if not seconds > 0:
        raise argparse.ArgumentTypeError("must be a positive number of seconds")
    return seconds


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
    check.add_argument("--output-format", choices=FORMATS, default=None,
                       help="report format: full (each finding with its source lines) on a terminal, concise "
                            "(one line per finding; `text` is the same) otherwise; KANALYZE_OUTPUT_FORMAT sets it too")
    check.add_argument("-o", "--output-file", help="write the report to this file instead of stdout")
    check.add_argument("--add-noqa", action="store_true",
                       help="add `# noqa: CODE` (`// NOLINT(CODE)` in CUDA) to each line with a finding, and report "
                            "how many were added")
    check.add_argument("--fix", action="store_true",
                       help="apply the safe fixes, write the files, and report what remains (standard input: "
                            "the fixed text on stdout, the report on stderr)")
    check.add_argument("--unsafe-fixes", action="store_true",
                       help="with --fix or --diff, apply the unsafe fixes too (they change numerics, NaN handling "
                            "or register use)")
    check.add_argument("--diff", action="store_true",
                       help="print a unified diff of what --fix would change, write nothing; exit 1 if there is "
                            "something to fix")
    check.add_argument("--stdin-filename", metavar="NAME",
                       help="check standard input (also the path `-`) as the file NAME: its suffix, "
                            "per-file-ignores and the report use it")
    check.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    check.add_argument("--statistics", action="store_true", help="print a count per code after the report")
    check.add_argument("--no-cache", action="store_true", help="do not read or write .kanalyze_cache")
    check.add_argument("--cache-dir", metavar="DIR",
                       help="where the cache lives (default: .kanalyze_cache beside the configuration; "
                            "KANALYZE_CACHE_DIR or `cache-dir` set it too)")
    check.add_argument("--respect-gitignore", dest="respect_gitignore", action="store_true", default=None,
                       help="leave out what .gitignore ignores when walking directories (the default)")
    check.add_argument("--no-respect-gitignore", dest="respect_gitignore", action="store_false",
                       help="walk files that .gitignore ignores too")
    check.add_argument("--force-exclude", action="store_true",
                       help="apply `exclude` to paths named on the command line too (for pre-commit)")
    check.add_argument("--config", help="read [tool.kanalyze] from this pyproject.toml")
    check.add_argument("--isolated", action="store_true", help="ignore every configuration file")
    check.add_argument("--file-timeout", type=_seconds, metavar="SECONDS",
                       help="CPU seconds one file's analysis may take before it is reported as KAN001 and the "
                            "run goes on (default 5; 30 with the MEM003/MEM004 proofs)")
    check.add_argument("--profile", choices=("auto", "candidate", "library"),
                       help="candidate: every finding at error (a generated kernel must earn trust); library: "
                            "findings that rest on a library's policy folded into one note per file; auto (default): "
                            "candidate for files that define ModelNew and for --dynamic, library otherwise")
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
    dynamic.add_argument("--timeout", type=_seconds, metavar="SECONDS",
                         help="each candidate's gates end within this: where a problem's size needs them in "
                              "several sessions, one that would end past it does not start, and its clauses "
                              "stay unconfirmed, saying so (default: none)")

    rules = sub.add_parser("rules", help="list every clause of the contract catalog")
    rules.add_argument("--output-format", choices=("text", "json"), default="text")

    explain = sub.add_parser("explain", help="print the documentation of a clause")
    explain.add_argument("code", help="a clause code, e.g. PRC002")

    lsp = sub.add_parser("lsp", help="run the language server over stdio (needs kanalyze[lsp])")
    lsp.add_argument("--stdio", action="store_true", help="accepted for editors that pass it (stdio is the default)")

    sub.add_parser("version", help="print the version")

    replay = sub.add_parser("replay", help="re-run witnesses: exit 1 while one still fails, 0 once all are fixed")
    replay.add_argument("witness", metavar="WITNESS.json|DIR", nargs="+",
                        help="witness files, or folders of them (their *.json), replayed in one process")
    replay.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    replay.add_argument("--output-format", choices=("text", "json"), default="text")
    replay.add_argument("--trust", action="store_true",
                        help="replay without checking the witness's signature (one written on another machine "
                             "or by another user): only for a file whose origin you trust")

    from kanalyze.audit.arguments import add_audit_parser  # imports nothing else of kanalyze

    add_audit_parser(sub, _gates, _selectors)
    return parser
