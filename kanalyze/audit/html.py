"""The audit's HTML report: one self-contained page, DIR/report.html, built from the journal.

    write_report(DIR, path=None, sample=5, seed=0) -> the page's path

One direction, as for the terminal table and the JSON summary: the journal
(results.jsonl) → summarize (summary.py) → this page.  Top to bottom it shows

    summary        the pairs, the share with a confirmed violation, the tolerance-free floor,
                   allclose's acceptances, the differential both ways, kanalyze's own
                   failures, the static pass's recall and precision, time per pair
    clauses        per clause: confirmed (with a witness, accepted by allclose),
                   refuted, unconfirmed; and a bar chart of the first three (svg.py)
                   (every figure is summary.py's: the page counts nothing itself)
    differential   allclose's verdict against kanalyze's, and the pairs where they disagree
    hand audit     N pairs per clause, seeded (sample.py), with a column to fill in by hand
    pairs          every journal line: a sortable table (report.js), each finding with its
                   message, each verdict with its summary and a link to its witness JSON

Self-contained: report.css and report.js (beside this module) are inlined; the
page's Content-Security-Policy lets nothing load from anywhere and runs only that
script (by its hash).  What came from the journal is escaped (html_pairs.Page).
The page is a function of the journal and the options alone (no date on it): the
same journal gives the same bytes.
"""

from __future__ import annotations

import base64
import hashlib
import os
from html import escape
from importlib.resources import files

from kanalyze import __version__
from kanalyze.audit.html_pairs import Page, confirmed_codes, name_of, pair_link, pairs_table
from kanalyze.audit.journal import RESULTS, read_records
from kanalyze.audit.sample import NO_VIOLATION, hand_audit_sample
from kanalyze.audit.summary import summarize
from kanalyze.audit.svg import grouped_bars

REPORT = "report.html"
SERIES = (("violations", "#b3261e"), ("with a witness", "#e8871e"), ("accepted by allclose", "#5b3cc4"))
OPEN_LIST = 20          # a list of pairs longer than this starts folded


def _asset(name: str) -> str:
    return files("kanalyze.audit").joinpath(name).read_text(encoding="utf-8")


def _hash(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode()


def _share(part: int, whole: int) -> str:
    return f"{part} of {whole} ({part / whole:.1%})" if whole else f"{part} of 0"


def _header(page: Page, records: list[dict]) -> str:
    def gates(value) -> str:
        return ",".join(map(str, value)) if isinstance(value, list) else str(value)

    options = sorted({(gates(r["options"].get("gates")), str(r["options"].get("device")))
                      for r in records if isinstance(r.get("options"), dict)})
    ran = "; ".join(f"gates {gates}, device {device}" for gates, device in options) or "no pairs yet"
    return (f"<h1>kanalyze audit: {page.text(os.path.basename(page.directory))}</h1>"
            f'<p class="note">From <code>{page.text(RESULTS)}</code> ({len(records)} lines): {page.text(ran)}. '
            f"Written by kanalyze {escape(__version__)}; <code>kanalyze audit --summary DIR</code> writes it again "
            "from the journal.</p>")


def _pair_list(page: Page, pairs: list[dict], with_reason: bool = False) -> str:
    if not pairs:
        return ""
    items = "".join(f"<li>{pair_link(page, p['id'])} {page.text(name_of(p.get('candidate')))}"
                    + (f": {page.text(p.get('reason'))}" if with_reason else "") + "</li>" for p in pairs)
    return f"<details{' open' if len(pairs) <= OPEN_LIST else ''}><summary>{len(pairs)} pairs</summary>" \
           f"<ul>{items}</ul></details>"


def _percent(share: float | None) -> str:
    return "n/a" if share is None else f"{share:.0%}"


def _static_text(static: dict) -> str:
    total = static["all"]
    if total["recall"] is None and total["precision"] is None:
        return "n/a (no gate confirmed or refuted a clause)"
    return (f"recall {_percent(total['recall'])} ({total['predicted']} of {total['predicted'] + total['missed']} "
            f"confirmed verdicts had a static flag), precision {_percent(total['precision'])} "
            f"({total['false_alarms']} flags refuted)")


def _late_text(late: dict) -> str:
    if not late.get("pairs"):
        return "none"
    gates = ", ".join(f"{code} {n}" for code, n in late["clauses"].items())
    return f"{late['pairs']} pairs ({gates}); a longer --pair-timeout runs them"


def _containment_text(containment: dict) -> str:
    if not containment["recorded"]:
        return "not recorded (journal lines of an earlier kanalyze)"
    if not containment["pairs"]:
        return f"every candidate ran in the full cage ({containment['recorded']} pairs recorded)"
    return (f"{containment['pairs']} pairs' candidates ran with less than the full cage: "
            + "; ".join(f"{gap} ({count} pairs)" for gap, count in containment["gaps"].items()))


def _time_text(time: dict) -> str:
    if not time["pairs"]:
        return "n/a (no pair timed yet)"
    return (f"median {time['median']:.1f} s, p90 {time['p90']:.1f} s, max {time['max']:.1f} s "
            f"({time['pairs']} pairs, {time['total']:.0f} s in all)")


def _summary(page: Page, summary: dict) -> str:
    differential, floor = summary["differential"], summary["tolerance_free"]
    accepted = summary["allclose_accepted"]
    rows = [
        ("pairs", f"{summary['pairs']} ({summary['done']} ran to the end"
                  + (f"; {summary['duplicates']} duplicate lines not run again" if summary["duplicates"] else "") + ")"),
        ("with a confirmed violation", _share(summary["with_violation"], summary["pairs"])),
        ("tolerance-free floor", _share(floor["pairs"], summary["pairs"])
         + f"; {floor['allclose_accepted']} of them accepted by allclose"),
        ("accepted by KernelBench's allclose", _share(accepted, summary["pairs"])),
        ("accepted by allclose, yet a violation confirmed",
         _share(differential["allclose_accepts_kanalyze_confirms"], accepted)),
        ("rejected by allclose, no violation confirmed", str(differential["allclose_rejects_kanalyze_confirms_nothing"])),
        ("the problem's own inputs (baseline)", "{passed} passed, {failed} failed, {undecided} undecided, "
                                                "{not_run} not run".format(**summary["baseline"])),
        ("kanalyze failed on", f"{summary['kanalyze_failed']} pairs (their verdicts are not the candidates')"
                               + (f"; {summary['retried_alone']} ran short beside others and ran again alone"
                                  if summary["retried_alone"] else "")),
        ("gates left unrun at the time limit", _late_text(summary.get("out_of_time") or {})),
        ("containment", _containment_text(summary["containment"])),
        ("static pass against the gates", _static_text(summary["static"])),
        ("time per pair", _time_text(summary["seconds_per_pair"])),
    ]
    items = "".join(f"<dt>{escape(name)}</dt><dd>{escape(value)}</dd>" for name, value in rows)
    failures = ""
    if summary["kanalyze_failures"]:
        failures = "<h3>Pairs kanalyze failed on</h3>" + _pair_list(page, summary["kanalyze_failures"], True)
    return f'<h2 id="summary">Summary</h2><dl class="figures">{items}</dl>{failures}'


def _clauses(figures: dict[str, dict]) -> str:
    if not figures:
        return '<h2 id="clauses">Clauses</h2><p class="note">No gate verdict in the journal yet.</p>'
    head = "".join(f'<th class="n">{escape(name)}</th>' for name in
                   ("confirmed", "with a witness", "accepted by allclose", "refuted", "unconfirmed"))
    rows = "".join(f"<tr><th>{escape(code)}</th>" + "".join(
        f'<td class="n">{f[key]}</td>' for key in ("confirmed", "with_witness", "allclose_accepted", "refuted",
                                                  "unconfirmed")) + "</tr>" for code, f in figures.items())
    chart = grouped_bars([(code, [f["confirmed"], f["with_witness"], f["allclose_accepted"]])
                          for code, f in figures.items()], list(SERIES),
                         "Per clause: pairs violating it, with a witness, accepted by allclose")
    return ('<h2 id="clauses">Clauses</h2><p class="note">A clause\'s verdicts over every pair its gate ran on. '
            "<em>Confirmed</em>: the gate reproduced a violation (a witness replays it); <em>accepted by "
            "allclose</em>: of those, the pairs KernelBench's own check passes, the violations it misses; "
            "<em>unconfirmed</em>: the gate could not decide.</p>"
            f"<table><thead><tr><th>clause</th>{head}</tr></thead><tbody>{rows}</tbody></table>{chart}")


def _differential(page: Page, records: list[dict], summary: dict) -> str:
    table: dict[str, list[int]] = {}
    for record in records:
        if record.get("status") == "duplicate":
            continue
        verdict = (record.get("allclose") or {}).get("verdict") or f"none (pair {record.get('status')})"
        table.setdefault(str(verdict), [0, 0])[0 if confirmed_codes(record) else 1] += 1
    order = ["PASS", "FAIL", "ERROR", "TIMEOUT", "CRASHED", "UNAVAILABLE"]
    rows = "".join(f"<tr><th>{page.text(v)}</th><td class=\"n\">{table[v][0]}</td><td class=\"n\">{table[v][1]}</td></tr>"
                   for v in sorted(table, key=lambda v: (order.index(v) if v in order else len(order), v)))
    differential = summary["differential"]
    return ('<h2 id="differential">Differential against allclose</h2>'
            '<p class="note">KernelBench accepts a kernel when five seeded trials pass '
            "<code>allclose(atol=rtol=1e-2)</code> (PASS); FAIL and ERROR are its rejections.</p>"
            "<table><thead><tr><th>allclose</th><th class=\"n\">violation confirmed</th>"
            f"<th class=\"n\">none confirmed</th></tr></thead><tbody>{rows}</tbody></table>"
            f"<h3>Accepted by allclose, with a violation kanalyze confirms "
            f"({differential['allclose_accepts_kanalyze_confirms']})</h3>"
            + _pair_list(page, differential["accepted_pairs"])
            + f"<h3>Rejected by allclose, with no violation confirmed "
              f"({differential['allclose_rejects_kanalyze_confirms_nothing']})</h3>"
            + _pair_list(page, differential["rejected_pairs"]))


def _sample_row(page: Page, stratum: str, record: dict) -> str:
    if stratum == NO_VIOLATION:
        what = f"allclose {page.text((record.get('allclose') or {}).get('verdict'))}; " + page.text(", ".join(
            f"{code} {v.get('status')}" for code, v in sorted(record.get("verdicts", {}).items())) or "no gate ran")
        witness = ""
    else:
        verdict = record["verdicts"][stratum]
        what = f'<span class="message">{page.text(verdict.get("summary"), multiline=True)}</span>'
        witness = page.witness(verdict.get("witness"))
    return (f"<tr><td>{pair_link(page, record['id'])}</td>"
            f'<td title="{page.text(record.get("candidate"))}">{page.text(name_of(record.get("candidate")))}</td>'
            f'<td>{page.text(name_of(record.get("problem")))}</td><td class="verdict">{what}</td><td>{witness}</td>'
            '<td class="hand"></td></tr>')


def _hand_audit(page: Page, records: list[dict], per_stratum: int, seed: int) -> str:
    strata = hand_audit_sample(records, per_stratum, seed)
    parts = ['<h2 id="hand-audit">Hand-audit sample</h2>',
             (f'<p class="note">Up to {per_stratum} pairs per clause confirmed, and {per_stratum} with nothing '
              f"confirmed, drawn with seed {seed} (<code>--sample {per_stratum} --sample-seed {seed}</code>): the "
              "same journal and seed draw the same pairs on any machine.  Read each candidate and its witness, "
              "mark your verdict in the last column, and report how many of kanalyze's you agree with.</p>")]
    for stratum in strata:
        head = "".join(f"<th>{name}</th>" for name in ("pair", "candidate", "problem", "verdict", "witness",
                                                        "hand verdict"))
        rows = "".join(_sample_row(page, stratum["stratum"], record) for record in stratum["pairs"])
        parts.append(f"<h3>{page.text(stratum['stratum'])}: {len(stratum['pairs'])} of {stratum['size']} pairs</h3>"
                     f'<table class="sample"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>')
    if not strata:
        parts.append('<p class="note">No pair ran to the end yet.</p>')
    return "".join(parts)


def render(directory: str, records: list[dict], page_path: str, sample: int = 5, seed: int = 0) -> str:
    page = Page(directory, page_path)
    summary = summarize(records)
    style, script = _asset("report.css"), _asset("report.js")
    policy = f"default-src 'none'; style-src '{_hash(style)}'; script-src '{_hash(script)}'"
    return "".join([
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{escape(policy)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>kanalyze audit: {page.text(os.path.basename(page.directory))}</title>",
        f"<style>{style}</style></head><body>",
        _header(page, records),
        _summary(page, summary),
        _clauses(summary["clauses"]),
        _differential(page, records, summary),
        _hand_audit(page, records, sample, seed),
        ('<h2 id="pairs-table">Pairs</h2><p class="note">Every line of the journal.  Click a column\'s name to '
         "sort by it, again to reverse; open a row's findings for each verdict's summary and its witness.</p>"),
        pairs_table(page, records),
        f"<script>{script}</script></body></html>\n",
    ])


def write_report(directory: str, path: str | None = None, sample: int = 5, seed: int = 0) -> str:
    """Write the page for DIR's journal (default DIR/report.html); returns its path.
    OSError when it cannot be written."""
    path = path or os.path.join(directory, REPORT)
    records, _, _ = read_records(os.path.join(directory, RESULTS))
    text = render(directory, records, path, sample, seed)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    partial = f"{path}.{os.getpid()}.part"      # two writers never share one
    try:
        with open(partial, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    return path
