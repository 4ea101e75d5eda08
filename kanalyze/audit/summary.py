"""The numbers an audit reports, computed from the journal's records alone.

    summarize(records) -> dict          (summary_text.render_text prints it, html.py shows it)

A *pair* is a journal line that is not a duplicate; a pair *violates* a clause when
its verdict for that clause is `confirmed`.  docs/audit.md ("How to read the
summary") documents every key; in short:

    pairs, done, duplicates     pairs audited, how many ran to the end, lines not run again
    with_violation (+ _share)   pairs with at least one confirmed violation, over all pairs
    allclose_accepted / _rejected / _no_verdict
                                KernelBench's verdicts: PASS; FAIL or ERROR; anything else
    clauses                     per clause: confirmed (the pairs violating it), with_witness,
                                witness_share, allclose_accepted, refuted, unconfirmed
    tolerance_free              the floor: pairs with a violation decided without a value
                                tolerance (`tolerance_free()` says which verdicts), kept apart
    differential                allclose accepts and kanalyze confirms a violation, and the
                                reverse, each with its list of pairs
    static                      per clause and in all: the static pass's flags against the
                                gates' verdicts (predicted, missed, false alarms, recall, precision)
    seconds_per_pair            the pairs' wall time (median, p90, max) and its phases
    against_check               kanalyze's time over KernelBench's check's (pairs' ratios' median, medians' ratio)
    kanalyze_failed / _failures pairs kanalyze itself failed on, with why
"""

from __future__ import annotations

import math
import statistics

from kanalyze.dynamic.judging import TIME_LIMIT
from kanalyze.verifier import TOLERANCE_FREE

STATUSES = ("confirmed", "refuted", "unconfirmed")
ACCEPTED = "PASS"                     # allclose: every trial close, KernelBench accepts
REJECTED = ("FAIL", "ERROR")          # allclose: values, shape or a raise; KernelBench rejects
# CMP003 compares values within a calibrated bound at each perturbed size; only these
# of its outcomes (pair.py records the gate's `failure`) need no tolerance.
CMP003_EXACT = ("crashed", "out_of_bounds")
PHASES = ("static", "gates", "allclose")

# How the dynamic pass words its own failures (runner.py, results.py, rundir.py): never the candidate's.
KANALYZE_FAILED = ("kanalyze could not", "kanalyze's worker", "kanalyze's reference worker",
                   "kanalyze's second reference worker", "kanalyze's judge", "kanalyze's gate failed")
# How a gate or case the pair's time limit left unrun says so (runner.out_of_time, streaming.py):
# neither a failure nor the candidate's.
OUT_OF_TIME = TIME_LIMIT


def tolerance_free(code: str, verdict: dict) -> bool:
    """A confirmed verdict decided without a value tolerance: a clause whose gate compares bits,
    value classes, sentinels or recorded events (kanalyze.verifier.TOLERANCE_FREE: EXC001,
    EXC002, MEM001-MEM004, ORD001, ORD002, RES001), or CMP003 when the perturbed run crashed
    or went out of bounds (not when its values were off)."""
    if verdict.get("status") != "confirmed":
        return False
    if code in TOLERANCE_FREE:
        return True
    return code == "CMP003" and verdict.get("failure") in CMP003_EXACT


def has_witness(verdict: dict) -> bool:
    """The journal names the verdict's witness file (pair.py writes one per confirmed verdict)."""
    witness = verdict.get("witness")
    return isinstance(witness, str) and not witness.startswith("not written")


def _own_failure(summary: str) -> bool:
    return any(phrase in summary for phrase in KANALYZE_FAILED)


def _undecided(record: dict) -> list[str]:
    """The reasons of the pair's undecided verdicts and baseline."""
    baseline = record.get("baseline") or {}
    reasons = [v["summary"] for v in record.get("verdicts", {}).values() if v["status"] == "unconfirmed"]
    return reasons + ([baseline.get("summary") or ""] if baseline.get("status") == "undecided" else [])


def _blames_kanalyze(record: dict) -> bool:
    if record.get("status") != "done":
        return True
    return any(_own_failure(reason) for reason in _undecided(record))


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _allclose(record: dict) -> str | None:
    return (record.get("allclose") or {}).get("verdict")


def _confirmed(record: dict) -> list[str]:
    return sorted(code for code, v in record.get("verdicts", {}).items() if v.get("status") == "confirmed")


def _label(record: dict, **extra) -> dict:
    return {"id": record["id"], "candidate": record.get("candidate"), **extra}


def allclose_rejected(record: dict) -> bool:
    """KernelBench's check ran on the pair's problem and rejected the candidate (FAIL or ERROR).
    A pair without a problem gets ERROR from no check at all: not a rejection."""
    return _allclose(record) in REJECTED and record.get("problem") is not None


def _clauses(pairs: list[dict]) -> dict[str, dict]:
    clauses: dict[str, dict] = {}
    for record in pairs:
        accepted = _allclose(record) == ACCEPTED
        for code, verdict in record.get("verdicts", {}).items():
            counts = clauses.setdefault(code, {**dict.fromkeys(STATUSES, 0), "with_witness": 0,
                                               "allclose_accepted": 0})
            counts[verdict["status"]] += 1
            if verdict["status"] == "confirmed":
                counts["with_witness"] += has_witness(verdict)
                counts["allclose_accepted"] += accepted
    for counts in clauses.values():
        counts["witness_share"] = _share(counts["with_witness"], counts["confirmed"])
    return dict(sorted(clauses.items()))


def _floor(pairs: list[dict]) -> dict:
    by_clause: dict[str, int] = {}
    floor, accepted = [], []
    for record in pairs:
        codes = sorted(code for code, v in record.get("verdicts", {}).items() if tolerance_free(code, v))
        for code in codes:
            by_clause[code] = by_clause.get(code, 0) + 1
        if codes:
            floor.append(record)
            if _allclose(record) == ACCEPTED:
                accepted.append(_label(record, clauses=codes))
    return {"pairs": len(floor), "share": _share(len(floor), len(pairs)), "clauses": dict(sorted(by_clause.items())),
            "allclose_accepted": len(accepted), "accepted_pairs": accepted}


def _differential(pairs: list[dict]) -> dict:
    accepted_but_violating, rejected_but_clean = [], []
    for record in pairs:
        codes = _confirmed(record)
        if _allclose(record) == ACCEPTED and codes:
            accepted_but_violating.append(_label(record, clauses=codes))
        if record.get("status") == "done" and allclose_rejected(record) and not codes:
            unconfirmed = sorted(c for c, v in record.get("verdicts", {}).items() if v["status"] == "unconfirmed")
            rejected_but_clean.append(_label(record, allclose=_allclose(record), unconfirmed=unconfirmed))
    accepted = sum(_allclose(r) == ACCEPTED for r in pairs)
    return {"allclose_accepts_kanalyze_confirms": len(accepted_but_violating),
            "share_of_accepted": _share(len(accepted_but_violating), accepted),
            "accepted_pairs": accepted_but_violating,
            "allclose_rejects_kanalyze_confirms_nothing": len(rejected_but_clean),
            "rejected_pairs": rejected_but_clean}


def _ratios(counts: dict[str, int]) -> dict:
    predicted = counts["predicted"]
    return {**counts, "recall": _share(predicted, predicted + counts["missed"]),
            "precision": _share(predicted, predicted + counts["false_alarms"])}


def _static(pairs: list[dict]) -> dict:
    """A confirmed verdict on a clause the static pass flagged was predicted, one without a
    flag was missed; a flagged clause the gate refuted is a false alarm.  Unconfirmed
    verdicts decide nothing and are left out."""
    per: dict[str, dict[str, int]] = {}
    for record in pairs:
        for code, verdict in record.get("verdicts", {}).items():
            counts = per.setdefault(code, {"predicted": 0, "missed": 0, "false_alarms": 0})
            flagged = bool(verdict.get("static_flag"))
            if verdict["status"] == "confirmed":
                counts["predicted" if flagged else "missed"] += 1
            elif verdict["status"] == "refuted" and flagged:
                counts["false_alarms"] += 1
    total = {key: sum(c[key] for c in per.values()) for key in ("predicted", "missed", "false_alarms")}
    targeted = sum((r.get("options") or {}).get("gates") == "targeted" for r in pairs)
    return {"clauses": {code: _ratios(c) for code, c in sorted(per.items())}, "all": _ratios(total),
            "targeted_pairs": targeted}


def _spread(values: list[float]) -> dict:
    """Median, 90th percentile (nearest rank: the smallest value at or above 90% of them) and max."""
    if not values:
        return {"median": None, "p90": None, "max": None}
    ordered = sorted(values)
    return {"median": round(statistics.median(ordered), 3), "p90": ordered[math.ceil(0.9 * len(ordered)) - 1],
            "max": ordered[-1]}


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _seconds(pairs: list[dict]) -> dict:
    wall = [r["wall_seconds"] for r in pairs if _number(r.get("wall_seconds"))]
    phases = {phase: _spread([r["seconds"][phase] for r in pairs
                              if isinstance(r.get("seconds"), dict) and _number(r["seconds"].get(phase))])
              for phase in PHASES}
    return {"pairs": len(wall), **_spread(wall), "total": round(sum(wall), 3), "phases": phases}


def _against_check(pairs: list[dict]) -> dict:
    """The static pass and the gates' seconds over KernelBench's check's (the check gave a
    verdict): the median of the pairs' ratios, and the ratio of the two medians (`of_medians`,
    what bench/bench_corpus.py prints); over every such pair; over those whose gates ran past the
    problem's own inputs (a verdict decided besides CMP001: a candidate that fails there skips the
    rest, at little cost); and per language (a CUDA C++ candidate's check loads the extension its
    gates built)."""
    rows = []
    for record in pairs:
        seconds = record.get("seconds") if isinstance(record.get("seconds"), dict) else {}
        if _allclose(record) not in (ACCEPTED, *REJECTED) or not all(
                _number(seconds.get(phase)) for phase in PHASES) or seconds["allclose"] <= 0:
            continue
        ran = any(v.get("status") in ("confirmed", "refuted") for code, v in record.get("verdicts", {}).items()
                  if code != "CMP001")
        language = (record.get("metadata") or {}).get("language") or "unknown"
        rows.append((seconds["static"] + seconds["gates"], seconds["allclose"], ran, str(language)))

    def median(chosen: list[tuple]) -> dict:
        if not chosen:
            return {"pairs": 0, "median": None, "of_medians": None}
        ratio = statistics.median(k / c for k, c, _, _ in chosen)
        medians = statistics.median(k for k, _, _, _ in chosen) / statistics.median(c for _, c, _, _ in chosen)
        return {"pairs": len(chosen), "median": round(ratio, 2), "of_medians": round(medians, 2)}

    return {**median(rows), "gates_ran": median([row for row in rows if row[2]]),
            "by_language": {lang: median([row for row in rows if row[3] == lang])
                            for lang in sorted({row[3] for row in rows})}}


def _baselines(pairs: list[dict]) -> dict:
    """How many pairs' candidates passed, failed or left undecided the problem's own inputs
    (the baseline every gate run starts with; pair.py), and how many never got there."""
    counts = {"passed": 0, "failed": 0, "undecided": 0, "not_run": 0}
    for record in pairs:
        status = (record.get("baseline") or {}).get("status")
        counts[status if status in counts else "not_run"] += 1
    return counts


def _containment(pairs: list[dict]) -> dict:
    """The protections candidates ran without, in the gates' workers or in the allclose check's
    cage (docs/worker-protocol.md), each with the number of pairs it concerns."""
    gaps: dict[str, int] = {}
    concerned = recorded = 0
    for record in pairs:
        recorded += "contained" in record or "contained" in (record.get("allclose") or {})
        found = {str(gap) for gap in [*(record.get("contained") or []),
                                      *((record.get("allclose") or {}).get("contained") or [])]}
        concerned += bool(found)
        for gap in found:
            gaps[gap] = gaps.get(gap, 0) + 1
    return {"recorded": recorded, "pairs": concerned, "gaps": dict(sorted(gaps.items(), key=lambda item: -item[1]))}


def _out_of_time(pairs: list[dict]) -> dict:
    """The gates a pair's time limit left unrun (each had a session of its own to come: held_budget.py),
    by clause, and the pairs they concern."""
    by_clause: dict[str, int] = {}
    concerned = 0
    for record in pairs:
        codes = [code for code, v in record.get("verdicts", {}).items()
                 if v["status"] == "unconfirmed" and v["summary"].startswith(OUT_OF_TIME)]
        concerned += bool(codes)
        for code in codes:
            by_clause[code] = by_clause.get(code, 0) + 1
    return {"pairs": concerned, "clauses": dict(sorted(by_clause.items()))}


def summarize(records: list[dict]) -> dict:
    pairs = [r for r in records if r.get("status") != "duplicate"]
    violating = sum(bool(_confirmed(r)) for r in pairs)
    accepted = sum(_allclose(r) == ACCEPTED for r in pairs)
    rejected = sum(allclose_rejected(r) for r in pairs)
    failed = [_label(record, reason=record.get("reason") or next(r for r in _undecided(record) if _own_failure(r)))
              for record in pairs if _blames_kanalyze(record)]
    return {
        "pairs": len(pairs),
        "done": sum(r.get("status") == "done" for r in pairs),
        "duplicates": len(records) - len(pairs),
        "with_violation": violating,
        "with_violation_share": _share(violating, len(pairs)),
        "allclose_accepted": accepted,
        "allclose_rejected": rejected,
        "allclose_no_verdict": len(pairs) - accepted - rejected,
        "baseline": _baselines(pairs),
        "clauses": _clauses(pairs),
        "tolerance_free": _floor(pairs),
        "differential": _differential(pairs),
        "static": _static(pairs),
        "seconds_per_pair": _seconds(pairs),
        "against_check": _against_check(pairs),
        "retried_alone": sum("retried" in r for r in pairs),   # ran short beside others (executor.py)
        "out_of_time": _out_of_time(pairs),
        "containment": _containment(pairs),
        "kanalyze_failed": len(failed),
        "kanalyze_failures": failed,
    }
