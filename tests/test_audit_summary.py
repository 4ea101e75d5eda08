"""The audit's summary (kanalyze/audit/summary.py, summary_text.py): every figure against
the journal's own lines, counted here independently.

One real `kanalyze audit` on the CPU (gates MEM002 and CMP003) over pairs picked so
that each figure has something to count: fixtures/kernelbench's MEM002 plant (an
in-place write allclose accepts: a bit-for-bit violation) and CMP003 plant (an
unmasked softmax: out of bounds at dim+1, allclose accepts), and candidates written
here: one right only at the benchmark's own width (CMP003 by value, outside the
floor), one that raises (CMP001 on the problem's own inputs), one that returns
float64 (allclose raises on the dtype; kanalyze's value gates see nothing: the
reverse differential), one with no problem at all, and a duplicate line.  Then
hand-written journals for the edges: no pairs, every pair failed, nothing confirmed.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from test_audit import CONTROLS, KB, _records

from kanalyze.audit.summary import summarize
from kanalyze.audit.summary_text import WIDTH, render_text
from kanalyze.cli import main

# The floor's rule, written out again: clauses decided on bits, classes, sentinels or events,
# and CMP003 when the perturbed run crashed or went out of bounds.
EXACT_CLAUSES = {"EXC001", "EXC002", "MEM001", "MEM002", "MEM003", "MEM004", "ORD001", "ORD002", "RES001"}

WIDTH_SPECIALIZED = '''import torch
import torch.nn.functional as F


class ModelNew(torch.nn.Module):
    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        y = F.leaky_relu(x, negative_slope=self.negative_slope)
        return y if x.shape[-1] == 1000 else y * 1.5
'''
RAISES = '''import torch


class ModelNew(torch.nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, x):
        raise RuntimeError("no kernel here")
'''
DOUBLE = '''import torch
import torch.nn.functional as F


class ModelNew(torch.nn.Module):
    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        return F.leaky_relu(x.double(), negative_slope=self.negative_slope)
'''


@pytest.fixture(scope="module")
def audited(tmp_path_factory) -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    folder = tmp_path_factory.mktemp("summary")
    corpus = folder / "corpus"
    corpus.mkdir()
    for name, text in (("width_specialized.py", WIDTH_SPECIALIZED), ("raises.py", RAISES), ("double.py", DOUBLE)):
        (corpus / name).write_text(text)
    leaky = str(KB / "level1" / "6_leaky_relu.py")
    lines = [{"candidate": str(KB / "candidates" / CONTROLS["MEM002"]["plant"]),
              "problem": str(KB / "level1" / "7_bias_relu.py")},
             {"candidate": str(KB / "candidates" / CONTROLS["CMP003"]["plant"]),
              "problem": str(KB / "level1" / "5_softmax.py")},
             {"candidate": str(corpus / "width_specialized.py"), "problem": leaky},
             {"candidate": str(corpus / "raises.py"), "problem": leaky},
             {"candidate": str(corpus / "double.py"), "problem": leaky},
             {"candidate": str(corpus / "raises.py")}]              # no problem: nothing to compare with
    lines.append(lines[0])
    manifest = corpus / "pairs.jsonl"
    manifest.write_text("".join(json.dumps(line) + "\n" for line in lines))
    output = folder / "out"
    assert main(["audit", "--manifest", str(manifest), "--output", str(output), "--gates", "MEM002,CMP003",
                 "--device", "cpu", "--jobs", "2", "-q"]) == 1
    return output


def _by_name(records: list[dict]) -> dict[str, dict]:
    return {Path(r["candidate"]).name + ("" if r.get("problem") else " (no problem)"): r
            for r in records if r["status"] != "duplicate"}


def _floor_codes(record: dict) -> list[str]:
    return sorted(code for code, v in record.get("verdicts", {}).items() if v["status"] == "confirmed" and (
        code in EXACT_CLAUSES or (code == "CMP003" and v.get("failure") in ("crashed", "out_of_bounds"))))


def _confirmed(record: dict) -> list[str]:
    return sorted(code for code, v in record.get("verdicts", {}).items() if v["status"] == "confirmed")


def test_the_pairs_give_what_each_figure_needs(audited) -> None:
    """The corpus does what the figures below rely on (else they would count nothing)."""
    pairs = _by_name(_records(audited))
    plant_mem, plant_cmp = pairs[CONTROLS["MEM002"]["plant"]], pairs[CONTROLS["CMP003"]["plant"]]
    assert plant_mem["verdicts"]["MEM002"]["status"] == "confirmed" and plant_mem["allclose"]["verdict"] == "PASS"
    assert plant_cmp["verdicts"]["CMP003"]["failure"] == "out_of_bounds" and plant_cmp["allclose"]["verdict"] == "PASS"
    width = pairs["width_specialized.py"]["verdicts"]["CMP003"]
    assert width["status"] == "confirmed" and width["failure"] == "wrong"         # by value: outside the floor
    assert _confirmed(pairs["raises.py"]) == ["CMP001"] and pairs["raises.py"]["allclose"]["verdict"] == "ERROR"
    # float64 out: KernelBench's allclose raises on the dtype, kanalyze's gates confirm nothing (its
    # values are right).  The reverse differential lists pairs like it for a person to read.
    assert _confirmed(pairs["double.py"]) == [] and pairs["double.py"]["allclose"]["verdict"] == "ERROR"
    assert pairs["raises.py (no problem)"]["allclose"]["verdict"] == "ERROR"
    # Each line says what the problem's own inputs showed, even with nothing confirmed.
    assert pairs["double.py"]["baseline"]["status"] == "passed"
    assert pairs["raises.py"]["baseline"]["status"] == "failed"
    assert pairs["raises.py"]["baseline"]["summary"] == pairs["raises.py"]["verdicts"]["CMP001"]["summary"]
    assert pairs["raises.py (no problem)"]["baseline"] is None


def test_every_figure_matches_the_journal(audited, capsys) -> None:
    lines = _records(audited)
    records = [r for r in lines if r["status"] != "duplicate"]
    assert main(["audit", "--summary", str(audited), "--output-format", "json"]) == 1
    summary = json.loads(capsys.readouterr().out)
    assert summary == summarize(lines)                                    # rebuilt from the journal alone
    assert summary["pairs"] == len(records) == 6 and summary["duplicates"] == len(lines) - 6 == 1
    violating = [r for r in records if _confirmed(r)]
    assert summary["with_violation"] == len(violating) and summary["with_violation_share"] == round(len(violating) / 6, 4)
    verdict = {r["id"]: (r.get("allclose") or {}).get("verdict") for r in records}
    accepted = [r for r in records if verdict[r["id"]] == "PASS"]
    rejected = [r for r in records if verdict[r["id"]] in ("FAIL", "ERROR") and r["problem"]]
    assert (summary["allclose_accepted"], summary["allclose_rejected"], summary["allclose_no_verdict"]) == \
        (len(accepted), len(rejected), 6 - len(accepted) - len(rejected))
    outcomes = [(r.get("baseline") or {}).get("status", "not_run") for r in records]
    assert summary["baseline"] == {status: outcomes.count(status)
                                   for status in ("passed", "failed", "undecided", "not_run")}

    codes = sorted({code for r in records for code in r["verdicts"]})
    assert list(summary["clauses"]) == codes
    for code in codes:
        mine = [r for r in records if code in r["verdicts"]]
        confirmed = [r for r in mine if r["verdicts"][code]["status"] == "confirmed"]
        witnessed = sum(Path(r["verdicts"][code]["witness"]).is_file() for r in confirmed)
        figures = summary["clauses"][code]
        assert figures == {
            "confirmed": len(confirmed), "refuted": sum(r["verdicts"][code]["status"] == "refuted" for r in mine),
            "unconfirmed": sum(r["verdicts"][code]["status"] == "unconfirmed" for r in mine),
            "with_witness": witnessed, "witness_share": round(witnessed / len(confirmed), 4) if confirmed else None,
            "allclose_accepted": sum(verdict[r["id"]] == "PASS" for r in confirmed)}, code

    floor = [r for r in records if _floor_codes(r)]
    assert {Path(r["candidate"]).name for r in floor} == {CONTROLS["MEM002"]["plant"], CONTROLS["CMP003"]["plant"]}
    assert summary["tolerance_free"] == {
        "pairs": len(floor), "share": round(len(floor) / 6, 4),
        "clauses": {c: sum(c in _floor_codes(r) for r in records) for c in sorted({c for r in floor
                                                                                    for c in _floor_codes(r)})},
        "allclose_accepted": sum(verdict[r["id"]] == "PASS" for r in floor),
        "accepted_pairs": [{"id": r["id"], "candidate": r["candidate"], "clauses": _floor_codes(r)}
                           for r in floor if verdict[r["id"]] == "PASS"]}

    differential = summary["differential"]
    both = [r for r in accepted if _confirmed(r)]
    assert differential["accepted_pairs"] == [{"id": r["id"], "candidate": r["candidate"], "clauses": _confirmed(r)}
                                              for r in both]
    assert differential["allclose_accepts_kanalyze_confirms"] == len(both) == 3
    assert differential["share_of_accepted"] == round(len(both) / len(accepted), 4)
    clean = [r for r in rejected if not _confirmed(r) and r["status"] == "done"]
    assert [Path(p["candidate"]).name for p in differential["rejected_pairs"]] == ["double.py"]
    assert differential["rejected_pairs"] == [
        {"id": r["id"], "candidate": r["candidate"], "allclose": verdict[r["id"]],
         "unconfirmed": sorted(c for c, v in r["verdicts"].items() if v["status"] == "unconfirmed")} for r in clean]
    assert differential["allclose_rejects_kanalyze_confirms_nothing"] == len(clean)


def test_static_recall_and_precision_and_time_match_the_journal(audited) -> None:
    records = [r for r in _records(audited) if r["status"] != "duplicate"]
    summary = summarize(records)
    verdicts = [(code, v) for r in records for code, v in r["verdicts"].items()]
    for code in summary["clauses"]:
        mine = [v for c, v in verdicts if c == code]
        predicted = sum(v["status"] == "confirmed" and v["static_flag"] for v in mine)
        missed = sum(v["status"] == "confirmed" and not v["static_flag"] for v in mine)
        alarms = sum(v["status"] == "refuted" and v["static_flag"] for v in mine)
        assert summary["static"]["clauses"][code] == {
            "predicted": predicted, "missed": missed, "false_alarms": alarms,
            "recall": round(predicted / (predicted + missed), 4) if predicted + missed else None,
            "precision": round(predicted / (predicted + alarms), 4) if predicted + alarms else None}, code
    everything = summary["static"]["all"]
    assert everything["predicted"] == sum(v["status"] == "confirmed" and v["static_flag"] for _, v in verdicts) >= 2
    assert everything["missed"] == sum(v["status"] == "confirmed" and not v["static_flag"] for _, v in verdicts) >= 1
    assert summary["static"]["targeted_pairs"] == 0

    wall = sorted(r["wall_seconds"] for r in records)
    assert summary["seconds_per_pair"]["pairs"] == len(wall) == 6
    assert summary["seconds_per_pair"]["median"] == round(statistics.median(wall), 3)
    assert summary["seconds_per_pair"]["p90"] == wall[math.ceil(0.9 * len(wall)) - 1] == wall[-1]
    assert summary["seconds_per_pair"]["max"] == max(wall)
    gates = sorted(r["seconds"]["gates"] for r in records)
    assert summary["seconds_per_pair"]["phases"]["gates"]["median"] == round(statistics.median(gates), 3)


def test_the_terminal_table_fits_100_columns_and_says_the_figures(audited, capsys) -> None:
    assert main(["audit", "--summary", str(audited)]) == 1
    text = capsys.readouterr().out
    summary = summarize(_records(audited))
    assert all(len(line) <= WIDTH for line in text.splitlines()), max(text.splitlines(), key=len)
    floor = summary["tolerance_free"]
    assert f"tolerance-free floor: {floor['pairs']} of 6 ({floor['share']:.1%})" in text
    assert "differential: 3 pairs accepted by allclose with a violation confirmed" in text
    row = next(line for line in text.splitlines() if line.startswith("MEM002 "))     # the clause table's, first
    mem002 = summary["clauses"]["MEM002"]
    assert row.split()[:3] == ["MEM002", str(mem002["confirmed"]), str(mem002["with_witness"])]
    for pair in summary["differential"]["accepted_pairs"] + summary["differential"]["rejected_pairs"]:
        assert f"{pair['id']}  {Path(pair['candidate']).name}" in text


# ---------------------------------------------------------------- hand-written journals


def _verdict(status: str, flag: bool = False, failure: str | None = None, witness: str | None = None) -> dict:
    return {"status": status, "summary": "s", "static_flag": flag, "witness": witness, "failure": failure}


def _pair(identifier: str, verdicts: dict, allclose: str | None = "PASS", **extra) -> dict:
    return {"id": identifier, "candidate": f"/c/{identifier}.py", "problem": "/p.py", "status": "done",
            "options": {"gates": "all", "device": "cpu"}, "verdicts": verdicts,
            "allclose": None if allclose is None else {"verdict": allclose, "detail": ""},
            "seconds": {"static": 0.5, "gates": 2.0, "allclose": 1.0}, "wall_seconds": 4.0, **extra}


def test_no_pairs() -> None:
    summary = summarize([])
    assert summary["pairs"] == summary["with_violation"] == summary["tolerance_free"]["pairs"] == 0
    assert summary["with_violation_share"] is None and summary["tolerance_free"]["share"] is None
    assert summary["static"]["all"]["recall"] is None and summary["static"]["all"]["precision"] is None
    assert summary["seconds_per_pair"] == {"pairs": 0, "median": None, "p90": None, "max": None, "total": 0,
                                           "phases": {p: {"median": None, "p90": None, "max": None}
                                                      for p in ("static", "gates", "allclose")}}
    text = render_text(summary)
    assert "time per pair: median n/a" in text and all(len(line) <= WIDTH for line in text.splitlines())


def test_every_pair_failed() -> None:
    records = [{"id": "t", "candidate": "/c/t.py", "problem": "/p.py", "status": "timeout", "wall_seconds": 600.0,
                "reason": "kanalyze's pair worker did not finish within --pair-timeout 600 s"},
               {"id": "k", "candidate": "/c/k.py", "problem": "/p.py", "status": "crashed", "wall_seconds": 3.0,
                "reason": "kanalyze's pair worker exited with status 3 without a result: " + "x" * 300},
               {"id": "t-dup2", "status": "duplicate", "duplicate_of": "t"}]
    summary = summarize(records)
    assert (summary["pairs"], summary["done"], summary["duplicates"], summary["kanalyze_failed"]) == (2, 0, 1, 2)
    assert summary["with_violation"] == 0 and summary["allclose_no_verdict"] == 2 and summary["clauses"] == {}
    assert summary["differential"]["accepted_pairs"] == summary["differential"]["rejected_pairs"] == []
    assert [f["id"] for f in summary["kanalyze_failures"]] == ["t", "k"]
    assert summary["seconds_per_pair"]["median"] == 301.5 and summary["seconds_per_pair"]["max"] == 600.0
    assert summary["seconds_per_pair"]["phases"]["gates"]["median"] is None        # no pair got that far
    text = render_text(summary)
    assert "kanalyze failed on 2 pairs" in text and all(len(line) <= WIDTH for line in text.splitlines())


def test_nothing_confirmed_decides_nothing_about_the_static_pass() -> None:
    records = [_pair("a", {"MEM002": _verdict("unconfirmed", flag=True), "CMP003": _verdict("unconfirmed")},
                     allclose="FAIL"),
               _pair("b", {"MEM002": _verdict("unconfirmed", flag=True), "CMP003": _verdict("unconfirmed")},
                     allclose="TIMEOUT")]
    summary = summarize(records)
    assert summary["with_violation"] == summary["tolerance_free"]["pairs"] == 0
    assert summary["static"]["clauses"]["MEM002"] == {"predicted": 0, "missed": 0, "false_alarms": 0,
                                                      "recall": None, "precision": None}
    assert summary["clauses"]["MEM002"]["witness_share"] is None
    # allclose rejected "a" and kanalyze confirmed nothing there; TIMEOUT is no verdict
    assert summary["differential"]["rejected_pairs"] == [{"id": "a", "candidate": "/c/a.py", "allclose": "FAIL",
                                                          "unconfirmed": ["CMP003", "MEM002"]}]
    assert (summary["allclose_rejected"], summary["allclose_no_verdict"]) == (1, 1)


def test_the_floor_rule_and_the_static_counts() -> None:
    records = [
        _pair("crash", {"CMP003": _verdict("confirmed", failure="crashed", witness="/w/1.json")}),
        _pair("oob", {"CMP003": _verdict("confirmed", flag=True, failure="out_of_bounds")}, allclose="FAIL"),
        _pair("value", {"CMP003": _verdict("confirmed", flag=True, failure="wrong", witness="not written: disk")}),
        _pair("older", {"CMP003": _verdict("confirmed")}),                     # a journal without `failure`
        _pair("masks", {"EXC001": _verdict("confirmed"), "CMP001": _verdict("confirmed", flag=True)}),
        _pair("raise", {"CMP001": _verdict("confirmed")}, allclose="ERROR"),
        _pair("alarm", {"MEM002": _verdict("refuted", flag=True), "ORD001": _verdict("refuted")}),
        _pair("orphan", {"MEM002": _verdict("refuted")}, allclose="ERROR", problem=None),
    ]
    summary = summarize(records)
    floor = summary["tolerance_free"]
    assert floor["clauses"] == {"CMP003": 2, "EXC001": 1} and floor["pairs"] == 3
    assert [p["id"] for p in floor["accepted_pairs"]] == ["crash", "masks"] and floor["allclose_accepted"] == 2
    assert summary["clauses"]["CMP003"]["with_witness"] == 1 and summary["clauses"]["CMP003"]["witness_share"] == 0.25
    assert summary["clauses"]["CMP003"]["allclose_accepted"] == 3
    assert summary["static"]["clauses"]["CMP003"] == {"predicted": 2, "missed": 2, "false_alarms": 0,
                                                      "recall": 0.5, "precision": 1.0}
    assert summary["static"]["clauses"]["MEM002"] == {"predicted": 0, "missed": 0, "false_alarms": 1,
                                                      "recall": None, "precision": 0.0}
    assert summary["static"]["all"] == {"predicted": 3, "missed": 4, "false_alarms": 1,
                                        "recall": round(3 / 7, 4), "precision": 0.75}
    # allclose's ERROR without a problem is no check at all: neither rejected nor in the list
    assert summary["allclose_rejected"] == 2 and summary["differential"]["rejected_pairs"] == []
    assert [p["id"] for p in summary["differential"]["accepted_pairs"]] == ["crash", "value", "older", "masks"]
    assert summarize(records + [_pair("t", {}, options={"gates": "targeted"})])["static"]["targeted_pairs"] == 1


def test_p90_is_the_nearest_rank_and_long_lists_are_cut_in_the_terminal() -> None:
    records = [_pair(f"p{n:02d}", {"MEM002": _verdict("confirmed")}, wall_seconds=float(n)) for n in range(1, 31)]
    summary = summarize(records)
    assert (summary["seconds_per_pair"]["median"], summary["seconds_per_pair"]["p90"],
            summary["seconds_per_pair"]["max"]) == (15.5, 27.0, 30.0)
    text = render_text(summary)
    assert "... and 10 more (--output-format json lists them all)" in text
    assert len(summary["differential"]["accepted_pairs"]) == 30


def test_a_baseline_kanalyze_could_not_decide_counts_as_its_failure() -> None:
    """With nothing flagged (targeted), a pair's only word may be its baseline: a reference
    worker that died there is kanalyze's failure, listed with its reason, not a clean pair."""
    died = "the reference crashed: the worker exited with code 70 (an exception escaped kanalyze's worker code)"
    records = [_pair("died", {}, baseline={"status": "undecided", "summary": died}),
               _pair("rejected", {}, baseline={"status": "undecided", "summary": "the reference rejects these sizes"}),
               _pair("clean", {}, baseline={"status": "passed", "summary": "within the calibrated bound"}),
               _pair("old", {})]
    summary = summarize(records)
    assert summary["baseline"] == {"passed": 1, "failed": 0, "undecided": 2, "not_run": 1}
    assert [(f["id"], f["reason"]) for f in summary["kanalyze_failures"]] == [("died", died)]
    text = render_text(summary)
    assert "baseline (the problem's own inputs): 1 passed, 0 failed, 2 undecided, 1 not run" in text
    # On an H100, eight CUDA C++ matmul pairs lost the reference worker that judges; each of their
    # gates said so, and the summary counted none of them as kanalyze's until it read these words.
    for words in ("the reference crashed: kanalyze's reference worker ended before it handed over the "
                  "reference's outputs (at the base sizes)",
                  "kanalyze's judge did not answer: it ended",
                  "the reference has no float64 result to calibrate against (kanalyze's second reference worker "
                  "failed: RuntimeError: boom)",
                  # a gate's own exception (a ConvTranspose3d pair on an H100 read a reference array that
                  # was never handed over) is kanalyze's bug, not a verdict on anyone
                  "kanalyze's gate failed: KeyError: 'out0'",
                  "kanalyze could not find the case's array `out0`: its judge does not hold it and its folder "
                  "does not have it"):
        lost = _pair("lost", {"CMP001": {"status": "unconfirmed", "summary": words}},
                     baseline={"status": "undecided", "summary": words})
        assert [f["id"] for f in summarize([lost])["kanalyze_failures"]] == ["lost"], words


def test_a_candidate_that_ran_with_less_than_the_cage_is_said_once_per_gap() -> None:
    """Where the kernel refused a namespace or a cgroup, the gates' workers or the allclose
    check ran the candidate with less containment: the summary counts the pairs, says each gap
    once with its count, and says nothing where every pair was recorded in the full cage."""
    no_pids = "no PID namespace of its own (unshare refused)"
    no_net = "no network namespace: network access is refused only by an audit hook"
    records = [_pair("gates", {}, contained=[no_pids]),
               _pair("both", {}, contained=[no_pids, no_net]),
               _pair("full", {}, contained=[]),
               _pair("old", {})]
    records[1]["allclose"]["contained"] = [no_pids]
    records[2]["allclose"]["contained"] = []
    summary = summarize(records)
    assert summary["containment"] == {"recorded": 3, "pairs": 2, "gaps": {no_pids: 2, no_net: 1}}
    text = render_text(summary)
    assert "containment: 2 pairs' candidates ran with less than the full cage" in text
    assert f"  2 pairs: {no_pids}" in text and f"  1 pairs: {no_net}" in text
    full = summarize([records[2]])
    assert full["containment"] == {"recorded": 1, "pairs": 0, "gaps": {}}
    assert "containment" not in render_text(full)


def test_gates_the_time_limit_left_unrun_are_counted_apart_from_failures() -> None:
    """A gate left unrun at the pair's time limit (runner.out_of_time) is neither kanalyze's failure
    nor the candidate's: the summary counts its pairs and clauses, and says how to run them."""
    from kanalyze.dynamic.runner import out_of_time

    late = out_of_time(7, 41.2, 12.0)
    assert late.startswith("not run: the time limit") and "7 sessions of about 41 s" in late
    records = [_pair("late", {"CMP001": {"status": "refuted", "summary": "ok"},
                              "EXC001": {"status": "unconfirmed", "summary": late},
                              "MEM002": {"status": "unconfirmed", "summary": late}}),
               _pair("late2", {"EXC001": {"status": "unconfirmed", "summary": late}}),
               _pair("other", {"EXC001": {"status": "unconfirmed", "summary": "no NaN reached the output"}})]
    summary = summarize(records)
    assert summary["out_of_time"] == {"pairs": 2, "clauses": {"EXC001": 2, "MEM002": 1}}
    assert summary["kanalyze_failed"] == 0
    assert "2 pairs left gates unrun at their time limit (EXC001 2, MEM002 1)" in render_text(summary)
    assert "unrun" not in render_text(summarize(records[2:]))


def test_what_a_candidate_printed_reaches_the_terminal_escaped() -> None:
    """A reason quotes a candidate's last output: its escape sequences and bidi controls are
    shown, not obeyed, as the check's text report shows them (report/escape.py)."""
    died = "crashed: \x1b[2J\u202eevil"
    records = [_pair("evil", {"CMP001": {"status": "unconfirmed", "summary": "kanalyze could not run the candidate: "
                                                                             + died}})]
    text = render_text(summarize(records))
    assert "\x1b" not in text and "\u202e" not in text
    assert "\\x1b[2J" in text and "\\u202e" in text


def test_kanalyze_s_time_over_the_check_s_is_a_median_of_pair_ratios() -> None:
    def timed(identifier, gates, check, language, verdicts, allclose="PASS"):
        return _pair(identifier, verdicts, allclose, metadata={"language": language},
                     seconds={"static": 1.0, "gates": gates, "allclose": check})
    crashed = {"CMP001": _verdict("confirmed"), "ORD001": _verdict("unconfirmed")}   # the baseline failed: skipped
    ran = {"CMP001": _verdict("refuted"), "ORD001": _verdict("refuted")}
    records = [timed("a", 1.0, 2.0, "triton", crashed),     # 1.0×
               timed("b", 9.0, 2.0, "triton", ran),         # 5.0×
               timed("c", 29.0, 3.0, "cuda", ran),          # 10.0×
               timed("d", 99.0, 1.0, "cuda", ran, allclose="TIMEOUT"),   # no check verdict: left out
               timed("e", 3.0, 0.0, "triton", ran)]         # a check of no time: left out
    against = summarize(records)["against_check"]
    # the medians' ratio beside: kanalyze's seconds 2, 10, 30 over the check's 2, 2, 3 -> 10 / 2
    assert against == {"pairs": 3, "median": 5.0, "of_medians": 5.0,
                       "gates_ran": {"pairs": 2, "median": 7.5, "of_medians": 8.0},
                       "by_language": {"cuda": {"pairs": 1, "median": 10.0, "of_medians": 10.0},
                                       "triton": {"pairs": 2, "median": 3.0, "of_medians": 3.0}}}
    text = render_text(summarize(records))
    assert "pair by pair: median 5.00× (3 pairs)\n  the medians' ratio 5.00×" in text and "7.50× where the gates ran" in text
    assert "cuda 10.00× (1), triton 3.00× (2)" in text and all(len(line) <= WIDTH for line in text.splitlines())
    assert "over KernelBench's check" not in render_text(summarize([]))   # nothing to say without pairs
