"""The numbers an audit reports, from the journal's records alone.

    summarize(records) -> dict          render_text(summary) -> str

    pairs           records (one per pair id), and how many ran to the end ("done")
    clauses         per clause: confirmed / refuted / unconfirmed verdicts
    differential    pairs KernelBench's allclose accepts (PASS) for which kanalyze
                    confirms a violation, with their ids; and the reverse: pairs
                    allclose rejects with no violation confirmed
    kanalyze_failed pairs kanalyze itself failed on: the pair's worker crashed or ran
                    out of time, or a verdict is unconfirmed for a failure of kanalyze's own (KANALYZE_FAILED)
    static_recall   confirmed verdicts whose clause the static pass had flagged, over
                    all confirmed verdicts (None when nothing was confirmed)
    duplicates      manifest lines that repeat a pair already audited (not run again)
"""

from __future__ import annotations

STATUSES = ("confirmed", "refuted", "unconfirmed")


# How the dynamic pass words its own failures (runner.py, results.py, rundir.py): never the candidate's.
KANALYZE_FAILED = ("kanalyze could not", "kanalyze's worker")


def _own_failure(summary: str) -> bool:
    return any(phrase in summary for phrase in KANALYZE_FAILED)


def _blames_kanalyze(record: dict) -> bool:
    if record.get("status") != "done":
        return True
    return any(v["status"] == "unconfirmed" and _own_failure(v["summary"]) for v in record.get("verdicts", {}).values())


def _label(record: dict) -> dict:
    return {"id": record["id"], "candidate": record.get("candidate")}


def summarize(records: list[dict]) -> dict:
    pairs = [r for r in records if r.get("status") != "duplicate"]
    clauses: dict[str, dict[str, int]] = {}
    confirmed = with_flag = 0
    accepted_but_violating, rejected_but_clean, failed = [], [], []
    for record in pairs:
        verdicts = record.get("verdicts", {})
        for code, verdict in verdicts.items():
            clauses.setdefault(code, dict.fromkeys(STATUSES, 0))[verdict["status"]] += 1
            if verdict["status"] == "confirmed":
                confirmed += 1
                with_flag += bool(verdict.get("static_flag"))
        violates = any(v["status"] == "confirmed" for v in verdicts.values())
        allclose = (record.get("allclose") or {}).get("verdict")
        if allclose == "PASS" and violates:
            accepted_but_violating.append(_label(record))
        if record.get("status") == "done" and allclose in ("FAIL", "ERROR") and not violates:
            rejected_but_clean.append(_label(record))
        if _blames_kanalyze(record):
            failed.append({**_label(record), "reason": record.get("reason") or next(
                v["summary"] for v in verdicts.values()
                if v["status"] == "unconfirmed" and _own_failure(v["summary"]))})
    return {
        "pairs": len(pairs),
        "done": sum(r.get("status") == "done" for r in pairs),
        "duplicates": len(records) - len(pairs),
        "clauses": dict(sorted(clauses.items())),
        "allclose_accepted": sum((r.get("allclose") or {}).get("verdict") == "PASS" for r in pairs),
        "with_violation": sum(any(v["status"] == "confirmed" for v in r.get("verdicts", {}).values()) for r in pairs),
        "differential": {"allclose_accepts_kanalyze_confirms": len(accepted_but_violating),
                         "accepted_pairs": accepted_but_violating,
                         "allclose_rejects_kanalyze_confirms_nothing": len(rejected_but_clean),
                         "rejected_pairs": rejected_but_clean},
        "kanalyze_failed": len(failed),
        "kanalyze_failures": failed,
        "static_recall": {"flagged": with_flag, "confirmed": confirmed,
                          "recall": round(with_flag / confirmed, 4) if confirmed else None},
    }


def render_text(summary: dict) -> str:
    differential = summary["differential"]
    recall = summary["static_recall"]
    lines = [f"pairs: {summary['pairs']} ({summary['done']} ran to the end"
             + (f"; {summary['duplicates']} duplicate lines not run again" if summary["duplicates"] else "") + ")",
             f"with a confirmed violation: {summary['with_violation']}; "
             f"accepted by KernelBench's allclose: {summary['allclose_accepted']}", ""]
    if summary["clauses"]:
        lines.append(f"{'clause':<8}{'confirmed':>11}{'refuted':>9}{'unconfirmed':>13}")
        for code, counts in summary["clauses"].items():
            lines.append(f"{code:<8}{counts['confirmed']:>11}{counts['refuted']:>9}{counts['unconfirmed']:>13}")
        lines.append("")
    lines.append(f"differential: {differential['allclose_accepts_kanalyze_confirms']} pairs accepted by allclose "
                 "with a violation kanalyze confirms")
    lines += [f"  {p['id']}  {p['candidate']}" for p in differential["accepted_pairs"]]
    lines.append(f"  and {differential['allclose_rejects_kanalyze_confirms_nothing']} rejected by allclose "
                 "with no violation confirmed")
    lines.append(f"kanalyze failed on {summary['kanalyze_failed']} pairs")
    lines += [f"  {p['id']}  {p['candidate']}: {p['reason']}" for p in summary["kanalyze_failures"]]
    shown = "n/a (nothing confirmed)" if recall["recall"] is None else \
        f"{recall['recall']:.0%} ({recall['flagged']} of {recall['confirmed']} confirmed verdicts had a static flag)"
    lines.append(f"static recall: {shown}")
    return "\n".join(lines) + "\n"
