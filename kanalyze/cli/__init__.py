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
This package (with the LSP server) is the only place that prints: parser.py the
grammar, check.py `kanalyze check` (output.py its report and `-o`, add_noqa.py
`--add-noqa`, fix.py `--fix` and `--diff`), commands.py the other subcommands.
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

from kanalyze import __version__
from kanalyze.cli.check import _cmd_check
from kanalyze.cli.commands import _cmd_audit, _cmd_explain, _cmd_lsp, _cmd_rules, rule_metadata
from kanalyze.cli.parser import EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS, SUBCOMMANDS, UsageError, build_parser
from kanalyze.cli.replay import cmd_replay

_rule_metadata = rule_metadata  # SARIF's rule table; tests compare formats with it

__all__ = ["EXIT_CLEAN", "EXIT_ERROR", "EXIT_FINDINGS", "UsageError", "build_parser", "main"]


def _normalise_argv(argv: list[str]) -> list[str]:
    """`kanalyze PATH...` → `kanalyze check PATH...` (as ruff did before subcommands)."""
    if not argv:
        return argv
    first = argv[0]
    if first in SUBCOMMANDS or first in ("-h", "--help", "--version"):
        return argv
    return ["check", *argv]


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
                   "replay": cmd_replay, "audit": _cmd_audit}[args.command]
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
