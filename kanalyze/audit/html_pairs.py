"""The per-pair parts of the audit's HTML report (html.py assembles the page).

    Page(directory, page_path)      escaping and the links of one page
    pairs_table(page, records)      the sortable table of every journal line
    findings(page, record)          one pair's verdicts (summary, witness link) and static findings

Everything that came from a journal line is untrusted: file names, manifest
metadata, messages, and the candidates' own output quoted in verdict summaries
and allclose's detail.  `Page.text` makes control and bidi characters visible
(report/escape.py) and then escapes the HTML, so a message holding `<script>`
shows as those characters.  A witness link is relative to the page's folder and
points at DIR/witnesses/NAME (where both executors put a witness), so the audit
folder can be moved or copied whole; a witness that is not there is named, unlinked.
"""

from __future__ import annotations

import os
from html import escape
from urllib.parse import quote

from kanalyze.report.escape import printable

STATUS_CLASS = {"confirmed": "confirmed", "refuted": "refuted", "unconfirmed": "unconfirmed"}


class Page:
    def __init__(self, directory: str, page_path: str) -> None:
        self.directory = os.path.abspath(directory)
        self.folder = os.path.dirname(os.path.abspath(page_path))

    @staticmethod
    def text(value, *, multiline: bool = False) -> str:
        return escape(printable("" if value is None else str(value), multiline=multiline), quote=True)

    def href(self, target: str) -> str:
        return self.text(quote(os.path.relpath(target, self.folder)))

    def witness_file(self, witness) -> str | None:
        """The witness JSON on disk: DIR/witnesses/NAME, else the path the journal holds; None if neither."""
        if not isinstance(witness, str) or witness.startswith("not written"):
            return None
        for candidate in (os.path.join(self.directory, "witnesses", os.path.basename(witness)), witness):
            if os.path.isfile(candidate):
                return candidate
        return None

    def witness(self, witness) -> str:
        """A link to the witness JSON, or why there is none."""
        if witness is None:
            return ""
        found = self.witness_file(witness)
        if found is None:
            missing = "" if str(witness).startswith("not written") else " (missing: not in witnesses/)"
            return f'<span class="small">witness {self.text(witness)}{missing}</span>'
        return f'<a class="witness" href="{self.href(found)}">{self.text(os.path.basename(found))}</a>'


def pair_anchor(identifier) -> str:
    return "pair-" + "".join(c for c in str(identifier) if c.isalnum() or c in "-_")


def pair_link(page: Page, identifier) -> str:
    return f'<a class="mono" href="#{pair_anchor(identifier)}">{page.text(identifier)}</a>'


def confirmed_codes(record: dict) -> list[str]:
    return sorted(code for code, v in record.get("verdicts", {}).items() if v.get("status") == "confirmed")


def name_of(path) -> str:
    return os.path.basename(path) if isinstance(path, str) else ""


def findings(page: Page, record: dict) -> str:
    """The verdicts (status, summary, witness) then the static findings (row, message), as two lists."""
    parts = []
    verdicts = record.get("verdicts", {})
    if verdicts:
        items = []
        for code, verdict in sorted(verdicts.items()):
            status = str(verdict.get("status"))
            flag = " (flagged by the static pass)" if verdict.get("static_flag") else ""
            witness = page.witness(verdict.get("witness"))
            items.append(f'<li><b>{page.text(code)}</b> <span class="{STATUS_CLASS.get(status, "")}">'
                         f'{page.text(status)}</span>{flag}: <span class="message">'
                         f'{page.text(verdict.get("summary"), multiline=True)}</span>'
                         + (f"<br>{witness}" if witness else "") + "</li>")
        parts.append("<p>Gate verdicts:</p><ul>" + "".join(items) + "</ul>")
    static = record.get("static", [])
    if static:
        items = [f'<li><b>{page.text(f.get("code"))}</b> line {page.text(f.get("row"))}'
                 + (f' in <code>{page.text(f["kernel"])}</code>' if f.get("kernel") else "")
                 + f': <span class="message">{page.text(f.get("message"), multiline=True)}</span></li>'
                 for f in static]
        parts.append("<p>Static findings:</p><ul>" + "".join(items) + "</ul>")
    baseline = record.get("baseline") or {}
    if baseline.get("status"):
        shown_as = STATUS_CLASS.get(BASELINE_CLASS.get(baseline["status"]), "")
        parts.append(f'<p>Baseline (the problem\'s own inputs): <span class="{shown_as}">'
                     f'{page.text(baseline["status"])}</span>: <span class="message">'
                     f'{page.text(baseline.get("summary"), multiline=True)}</span></p>')
    if record.get("retried"):
        parts.append(f'<p>{page.text(record["retried"])}</p>')
    allclose = record.get("allclose") or {}
    if allclose.get("detail"):
        parts.append(f'<p>allclose: {page.text(allclose.get("verdict"))}: '
                     f'<span class="message">{page.text(allclose["detail"], multiline=True)}</span></p>')
    if record.get("reason"):
        parts.append(f'<p>Why: <span class="message">{page.text(record["reason"], multiline=True)}</span></p>')
    if not parts:
        return ""
    summary = f"{len(verdicts)} verdicts, {len(static)} static findings"
    return f"<details><summary>{summary}</summary>" + "".join(parts) + "</details>"


def _metadata(page: Page, record: dict) -> str:
    metadata = record.get("metadata") or {}
    if not isinstance(metadata, dict) or not metadata:
        return ""
    shown = ", ".join(f"{key}={value}" for key, value in sorted(metadata.items(), key=lambda kv: str(kv[0])))
    return f'<br><span class="small">{page.text(shown)}</span>'


# (heading, numeric?) of the pairs table, in order; report.js sorts by any of them.
COLUMNS = (("pair", False), ("candidate", False), ("problem", False), ("status", False), ("allclose", False),
           ("baseline", False), ("violations", True), ("static findings", True), ("seconds", True),
           ("findings", False))
# A baseline's status shown as the gate status it amounts to (its CSS class).
BASELINE_CLASS = {"passed": "refuted", "failed": "confirmed", "undecided": "unconfirmed"}


def _row(page: Page, record: dict) -> str:
    codes = confirmed_codes(record)
    status = str(record.get("status"))
    if status == "duplicate":
        status_cell = f"duplicate of {pair_link(page, record.get('duplicate_of'))}"
    else:
        status_cell = page.text(status)
    seconds = record.get("wall_seconds")
    seconds_cell = f"{seconds:.1f}" if isinstance(seconds, (int, float)) else ""
    candidate, problem = record.get("candidate"), record.get("problem")
    cells = [
        f'<td class="mono">{page.text(record["id"])}</td>',
        (f'<td data-sort="{page.text(name_of(candidate))}" title="{page.text(candidate)}">'
         f"{page.text(name_of(candidate))}{_metadata(page, record)}</td>"),
        f'<td title="{page.text(problem)}">{page.text(name_of(problem))}</td>',
        f"<td>{status_cell}</td>",
        f"<td>{page.text((record.get('allclose') or {}).get('verdict', ''))}</td>",
        f"<td>{page.text((record.get('baseline') or {}).get('status', ''))}</td>",
        f'<td class="n" data-sort="{len(codes)}">{len(codes)}'
        + (f'<br><span class="confirmed">{page.text(", ".join(codes))}</span>' if codes else "") + "</td>",
        f'<td class="n">{len(record.get("static", []))}</td>',
        f'<td class="n" data-sort="{seconds if seconds_cell else ""}">{seconds_cell}</td>',
        f'<td class="findings">{findings(page, record)}</td>',
    ]
    return f'<tr id="{pair_anchor(record["id"])}">' + "".join(cells) + "</tr>"


def pairs_table(page: Page, records: list[dict]) -> str:
    number = ' class="n" data-type="number"'
    head = "".join(f'<th{number if numeric else ""}><button type="button">{escape(name)}</button></th>'
                   for name, numeric in COLUMNS)
    body = "".join(_row(page, record) for record in records)
    return (f'<table class="sortable" id="pairs"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table>")
