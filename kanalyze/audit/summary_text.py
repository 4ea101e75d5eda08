"""The audit's summary as a terminal reads it: render_text(summary) -> str.

Every line fits in 100 columns (a path is shown by its file name, a long line is
cut with "…").  Each list of pairs shows its first LISTED entries and says how many
more there are; `--output-format json` and the HTML report list them all.
"""

from __future__ import annotations

import os

from kanalyze.report.escape import printable

WIDTH = 100
LISTED = 20


def _percent(share: float | None) -> str:
    return "n/a" if share is None else f"{share:.1%}"


def _of(part: int, whole: int, share: float | None) -> str:
    return f"{part} of {whole} ({_percent(share)})"


def _seconds(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f} s" if value < 1 else f"{value:.1f} s"


def _clip(line: str) -> str:
    """One line of the table, cut to WIDTH, its controls escaped: reasons quote what candidates
    printed, and a journal's lines are as trustworthy as its folder (report/escape.py)."""
    line = printable(line)
    return line if len(line) <= WIDTH else line[:WIDTH - 1] + "…"


def _name(path) -> str:
    return os.path.basename(path) if isinstance(path, str) else "(no candidate)"


def _listed(pairs: list[dict], detail) -> list[str]:
    lines = [_clip(f"    {p['id']}  {_name(p.get('candidate'))}  {detail(p)}".rstrip()) for p in pairs[:LISTED]]
    if len(pairs) > LISTED:
        lines.append(f"    ... and {len(pairs) - LISTED} more (--output-format json lists them all)")
    return lines


CLAUSE_COLUMNS = (("clause", 8), ("violating", 10), ("with a witness", 17), ("allclose accepts", 18),
                  ("tolerance-free", 16), ("refuted", 9), ("unconfirmed", 13))
STATIC_COLUMNS = (("static", 8), ("predicted", 10), ("missed", 8), ("false alarms", 14), ("recall", 9),
                  ("precision", 11))


def _row(cells: list[str], columns) -> str:
    return "".join(f"{cell:<{width}}" if n == 0 else f"{cell:>{width}}"
                   for n, (cell, (_, width)) in enumerate(zip(cells, columns)))


def _clause_table(summary: dict) -> list[str]:
    floor = summary["tolerance_free"]["clauses"]
    lines = [_row([name for name, _ in CLAUSE_COLUMNS], CLAUSE_COLUMNS)]
    for code, c in summary["clauses"].items():
        witness = f"{c['with_witness']} ({_percent(c['witness_share'])})" if c["confirmed"] else "0"
        lines.append(_row([code, str(c["confirmed"]), witness, str(c["allclose_accepted"]), str(floor.get(code, 0)),
                           str(c["refuted"]), str(c["unconfirmed"])], CLAUSE_COLUMNS))
    return lines


def _static_table(static: dict) -> list[str]:
    lines = [_row([name for name, _ in STATIC_COLUMNS], STATIC_COLUMNS)]
    for code, c in [*static["clauses"].items(), ("all", static["all"])]:
        lines.append(_row([code, str(c["predicted"]), str(c["missed"]), str(c["false_alarms"]),
                           _percent(c["recall"]), _percent(c["precision"])], STATIC_COLUMNS))
    if static["targeted_pairs"]:
        lines.append(f"({static['targeted_pairs']} pairs ran with --gates targeted: no gate ran there on a "
                     "clause not flagged,")
        lines.append(" so a violation the static pass missed cannot show; recall needs --gates all)")
    return lines


def _head(summary: dict) -> list[str]:
    pairs, floor = summary["pairs"], summary["tolerance_free"]
    repeated = summary["duplicates"]
    duplicates = f"; {repeated} duplicate line{'s' * (repeated != 1)} not run again" if repeated else ""
    violating = _of(summary["with_violation"], pairs, summary["with_violation_share"])
    return [f"pairs: {pairs} ({summary['done']} ran to the end{duplicates})",
            f"with a confirmed violation: {violating}",
            (f"tolerance-free floor: {_of(floor['pairs'], pairs, floor['share'])}; "
             f"{floor['allclose_accepted']} of them accepted by allclose"),
            (f"KernelBench's allclose: {summary['allclose_accepted']} accepted, {summary['allclose_rejected']} "
             f"rejected, {summary['allclose_no_verdict']} without a verdict"),
            _baseline(summary["baseline"])]


def _baseline(counts: dict) -> str:
    return (f"baseline (the problem's own inputs): {counts['passed']} passed, {counts['failed']} failed, "
            f"{counts['undecided']} undecided, {counts['not_run']} not run")


def _differential(differential: dict) -> list[str]:
    def rejected(pair: dict) -> str:
        unconfirmed = f"; unconfirmed {' '.join(pair['unconfirmed'])}" if pair["unconfirmed"] else ""
        return f"allclose {pair['allclose']}{unconfirmed}"

    accepted = differential['allclose_accepts_kanalyze_confirms']
    return [(f"differential: {accepted} pair{'' if accepted == 1 else 's'} accepted by allclose "
             f"with a violation confirmed ({_percent(differential['share_of_accepted'])} of the accepted)"),
            *_listed(differential["accepted_pairs"], lambda pair: " ".join(pair["clauses"])),
            (f"  and {differential['allclose_rejects_kanalyze_confirms_nothing']} rejected by allclose "
             "with no violation confirmed"),
            *_listed(differential["rejected_pairs"], rejected)]


def _time(time: dict) -> list[str]:
    lines = [(f"time per pair: median {_seconds(time['median'])}, p90 {_seconds(time['p90'])}, "
              f"max {_seconds(time['max'])} ({time['pairs']} pairs, {_seconds(time['total'])} in all)")]
    phases = time["phases"]
    if any(phase["median"] is not None for phase in phases.values()):
        lines.append("  median per phase: " + ", ".join(f"{name} {_seconds(phase['median'])}"
                                                        for name, phase in phases.items()))
    return lines


def _against_check(against: dict) -> list[str]:
    """kanalyze's time over the check's, where any pair has both."""
    if not against["pairs"]:
        return []
    ran = against["gates_ran"]
    languages = ", ".join(f"{lang} {_times(m['median'])} ({m['pairs']})" for lang, m in against["by_language"].items())
    return [f"kanalyze's time over KernelBench's check's, pair by pair: median {_times(against['median'])} "
            f"({against['pairs']} pairs)",
            f"  the medians' ratio {_times(against['of_medians'])} (kanalyze's median seconds over the check's)",
            f"  {_times(ran['median'])} where the gates ran past the baseline ({ran['pairs']}); {languages}"]


def _times(ratio) -> str:
    return "n/a" if ratio is None else f"{ratio:.2f}×"


def _containment(containment: dict) -> list[str]:
    """Said only where a candidate ran with less than the full cage, and then once per gap."""
    if not containment["pairs"]:
        return []
    return [f"containment: {containment['pairs']} pairs' candidates ran with less than the full cage",
            *(f"  {count} pairs: {gap}" for gap, count in containment["gaps"].items())]


def render_text(summary: dict) -> str:
    lines = [*_head(summary), ""]
    if summary["clauses"]:
        lines += [*_clause_table(summary), ""]
    lines += _differential(summary["differential"])
    if summary["static"]["clauses"]:
        lines += ["", *_static_table(summary["static"])]
    lines += ["", *_time(summary["seconds_per_pair"]), *_against_check(summary["against_check"])]
    if summary["retried_alone"]:
        lines.append(f"{summary['retried_alone']} pairs ran short of memory, disk or time beside others and ran again alone")
    late = summary.get("out_of_time") or {}
    if late.get("pairs"):
        gates = ", ".join(f"{code} {n}" for code, n in late["clauses"].items())
        lines.append(f"{late['pairs']} pairs left gates unrun at their time limit ({gates}): a longer --pair-timeout runs them")
    lines += _containment(summary["containment"])
    lines.append(f"kanalyze failed on {summary['kanalyze_failed']} pairs")
    lines += _listed(summary["kanalyze_failures"], lambda pair: pair["reason"])
    return "\n".join(_clip(line) for line in lines) + "\n"
