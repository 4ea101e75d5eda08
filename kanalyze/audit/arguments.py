"""The arguments of `kanalyze audit` (kanalyze/cli.py adds them; command.py reads them).

Imports nothing of kanalyze, so that building the parser stays cheap for `kanalyze check`.
"""

from __future__ import annotations


def add_audit_parser(sub, gates_type, selectors_type) -> None:
    """`gates_type` is cli.py's `--gates` parser (codes or prefixes, or `all`); `selectors_type`
    its `--select` parser."""
    def gates(value: str):
        return "targeted" if value.strip().lower() == "targeted" else gates_type(value)

    audit = sub.add_parser("audit", help="audit candidate/problem pairs: static pass, gates and KernelBench's "
                                         "allclose per pair, into a resumable journal (kanalyze/audit)")
    audit.add_argument("candidates", nargs="*", metavar="CANDIDATE",
                       help="candidate files or folders (with --kernelbench or --reference)")
    audit.add_argument("--manifest", metavar="PAIRS.jsonl", help='one {"candidate": ..., "problem": ...} a line')
    audit.add_argument("--kernelbench", metavar="DIR", help="pair level1_problem19_*.py with DIR/level1/19_*.py")
    audit.add_argument("--reference", metavar="PROBLEM.py", help="the problem every candidate solves")
    audit.add_argument("--output", metavar="DIR", help="where results.jsonl (the journal) and witnesses/ go")
    audit.add_argument("--summary", metavar="DIR", help="print the summary of DIR's journal again; run nothing")
    audit.add_argument("--gates", type=gates,
                       default="all", metavar="all|targeted|CODES",
                       help="every gate (default), the flagged clauses' gates, or these clauses' gates")
    audit.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    audit.add_argument("--extend-select", type=selectors_type, default=[], metavar="CODES",
                       help="add to the static pass's default selection (MEM003,MEM004: the z3 proofs)")
    audit.add_argument("--ir", action="store_true",
                       help="also compile each candidate's kernels and check the compiled code (check --ir)")
    audit.add_argument("--jobs", type=int, default=1,
                       help="pairs at once, each in its own process (default: 1); with --executor ray and "
                            "--device cuda, pairs at once on each GPU of the cluster")
    audit.add_argument("--executor", choices=("local", "ray"), default="local",
                       help="local: child processes here (default); ray: one Ray task a pair, on a cluster "
                            "(pip install 'kanalyze[ray]'), as many at once as it has CPUs (with cuda: "
                            "--jobs on each GPU)")
    audit.add_argument("--address", metavar="ADDR",
                       help="the Ray cluster (host:port, ray://host:port); default: $RAY_ADDRESS, the cluster "
                            "last started on this machine, or a new local Ray")
    audit.add_argument("--pair-timeout", type=float, default=600.0, metavar="SECONDS",
                       help="time limit of one pair, everything included (default: 600)")
    audit.add_argument("--case-timeout", type=float, metavar="SECONDS", help="time limit of one gate case")
    audit.add_argument("--stop-after", type=float, metavar="SECONDS",
                       help="start no pair after this many seconds; the running ones end and are written, and a "
                            "rerun resumes the rest (the local executor)")
    audit.add_argument("--no-spares", dest="spares", action="store_false",
                       help="start each pair's process at its turn, none standing by while others run (less "
                            "memory; a pair's time then includes its imports; the local executor)")
    audit.add_argument("--check-builds", choices=("shared", "own"), default="shared",
                       help="where KernelBench's check gets a CUDA C++ candidate's extension: the gates' build "
                            "(shared, the default: one build a pair) or its own, built as KernelBench builds it "
                            "(own: the check's time then holds a build too, as kanalyze's does)")
    audit.add_argument("--output-format", choices=("text", "json"), default="text", help="of the summary")
    audit.add_argument("--html", metavar="PATH",
                       help="where the HTML report goes (default: DIR/report.html, beside the journal)")
    audit.add_argument("--sample", type=int, default=5, metavar="N",
                       help="pairs per clause in the report's hand-audit sample (default: 5)")
    audit.add_argument("--sample-seed", type=int, default=0, metavar="SEED",
                       help="the seed that draws the hand-audit sample (default: 0)")
    audit.add_argument("-q", "--quiet", action="store_true", help="no progress display")
