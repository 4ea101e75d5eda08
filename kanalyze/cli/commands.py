"""The small subcommands: `rules`, `explain`, `lsp`, `audit` (`replay`: replay.py)."""

from __future__ import annotations

import argparse
import sys

from kanalyze.cli.parser import EXIT_CLEAN, EXIT_ERROR, UsageError


def rule_metadata() -> list[dict]:
    from kanalyze.rules import all_rules, cuda_detector_classes, explanation

    return [{
        "code": r.code, "name": r.name, "summary": r.summary, "gate": r.gate,
        "docs": explanation(r), "help_uri": r.help_uri(),
        # static detectors in Triton source, in CUDA C++, or both
        "has_detectors": r.has_detectors or bool(cuda_detector_classes(r.code)),
    } for r in all_rules()]


def _cmd_audit(args: argparse.Namespace) -> int:
    from kanalyze.audit.command import run_audit_command

    return run_audit_command(args, UsageError)


def _cmd_rules(args: argparse.Namespace) -> int:
    from kanalyze.config import OPT_IN

    rules = rule_metadata()
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
