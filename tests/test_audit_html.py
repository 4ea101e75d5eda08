"""The audit's HTML report (kanalyze/audit/html.py), read in a real headless Chromium (tests/browser.py).

One real `kanalyze audit` on the CPU builds the page: fixtures/kernelbench's MEM002
plant and twin and its CMP001 plant, and a hostile pair written here, whose file name
holds an `<img onerror>` tag, whose manifest metadata holds a `<script>`, and whose
candidate raises with a `<script>` in its message (which reaches the verdict summary
and allclose's detail).  In the browser: the page loads with no console error and
loads nothing else, no injected markup runs, the pairs table sorts when its headers
are clicked, and every link resolves, from a copy of the audit folder too.

Chromium is required, not optional: without it these tests fail (Debian: `apt-get
install -y chromium`; or name an executable in $KANALYZE_CHROMIUM).
"""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from browser import Browser

from kanalyze.audit.html import render
from kanalyze.audit.html_pairs import COLUMNS
from kanalyze.audit.journal import read_records
from kanalyze.audit.sample import NO_VIOLATION, hand_audit_sample
from kanalyze.cli import main

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "fixtures" / "kernelbench"
CONTROLS = json.loads((KB / "controls.json").read_text())
HOSTILE_NAME = "level1_problem6_<img src=x onerror=window.__pwned=1>.py"
HOSTILE_MESSAGE = "<script>window.__pwned = 2</script>"
HOSTILE_MODEL = "<script>window.__pwned=3</script>"
HOSTILE_SOURCE = f'''import torch


class ModelNew(torch.nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, x):
        raise RuntimeError({HOSTILE_MESSAGE!r})
'''


@pytest.fixture(scope="module")
def audited(tmp_path_factory) -> Path:
    """The audit folder (journal, witnesses, report.html) of one real audit of four pairs."""
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    folder = tmp_path_factory.mktemp("html")
    corpus = folder / "corpus"
    corpus.mkdir()
    (corpus / HOSTILE_NAME).write_text(HOSTILE_SOURCE)
    pairs = [(KB / "candidates" / CONTROLS["MEM002"]["plant"], "7_bias_relu.py", "model-a"),
             (KB / "candidates" / CONTROLS["MEM002"]["twin"], "7_bias_relu.py", "model-a"),
             (KB / "candidates" / CONTROLS["CMP001"]["plant"], "5_softmax.py", "model-b"),
             (corpus / HOSTILE_NAME, "6_leaky_relu.py", HOSTILE_MODEL)]
    manifest = corpus / "pairs.jsonl"
    manifest.write_text("".join(json.dumps({"candidate": str(candidate), "problem": str(KB / "level1" / problem),
                                            "model": model}) + "\n" for candidate, problem, model in pairs))
    output = folder / "audit"
    code = main(["audit", "--manifest", str(manifest), "--output", str(output), "--gates", "MEM002,CMP001",
                 "--device", "cpu", "--jobs", "2", "-q"])
    assert code == 1                                        # violations confirmed
    assert (output / "report.html").is_file()
    return output


@pytest.fixture(scope="module")
def browser():
    if Browser.find() is None:
        pytest.fail("the HTML report's browser tests need Chromium: apt-get install -y chromium "
                    "(or name it in $KANALYZE_CHROMIUM)", pytrace=False)
    with Browser() as chromium:
        yield chromium


def _records(folder: Path) -> list[dict]:
    return read_records(str(folder / "results.jsonl"))[0]


def _rows(browser: Browser) -> list[str]:
    return browser.evaluate("Array.from(document.querySelectorAll('#pairs tbody tr')).map(r => r.id)")


def _header(name: str) -> str:
    return f"#pairs thead th:nth-child({[c for c, _ in COLUMNS].index(name) + 1})"


def test_the_page_loads_without_errors_loads_nothing_else_and_runs_no_injected_markup(audited, browser) -> None:
    browser.open((audited / "report.html").as_uri())
    assert browser.errors == []
    assert browser.evaluate("performance.getEntriesByType('resource').length") == 0      # self-contained
    assert browser.evaluate("typeof window.__pwned") == "undefined"
    assert browser.evaluate("document.scripts.length") == 1                               # report.js alone
    assert browser.evaluate("document.querySelectorAll('img, iframe, object, embed').length") == 0
    text = browser.evaluate("document.body.textContent")
    for hostile in (HOSTILE_MESSAGE, HOSTILE_MODEL, HOSTILE_NAME):
        assert hostile in text                                                             # shown as text
    records = _records(audited)
    assert len(_rows(browser)) == len(records) == 4
    assert browser.evaluate("document.querySelectorAll('svg.chart').length") == 1
    # The clauses table says what the journal says.
    shown = browser.evaluate("Object.fromEntries(Array.from(document.querySelectorAll('#clauses + p + table tbody tr'))"
                             ".map(r => [r.cells[0].textContent, Array.from(r.cells).slice(1).map(c => +c.textContent)]))")
    for code in ("MEM002", "CMP001"):
        confirmed = [r for r in records if r["verdicts"][code]["status"] == "confirmed"]
        expected = [len(confirmed), sum(Path(r["verdicts"][code]["witness"]).is_file() for r in confirmed),
                    sum(r["allclose"]["verdict"] == "PASS" for r in confirmed),
                    sum(r["verdicts"][code]["status"] == "refuted" for r in records),
                    sum(r["verdicts"][code]["status"] == "unconfirmed" for r in records)]
        assert shown[code] == expected, code
    assert shown["MEM002"][0] == 1 and shown["CMP001"][0] == 2  # the plants, and the hostile candidate's raise
    # Each pair's baseline (the problem's own inputs), as its line says.
    cells = browser.evaluate(f"Array.from(document.querySelectorAll('#pairs tbody td:nth-child("
                             f"{[c for c, _ in COLUMNS].index('baseline') + 1})')).map(c => c.textContent)")
    assert cells == [(r.get("baseline") or {}).get("status", "") for r in records]
    assert "failed" in cells                                                               # the raise


def test_clicking_a_column_sorts_the_pairs_table(audited, browser) -> None:
    browser.open((audited / "report.html").as_uri())
    records = _records(audited)
    assert _rows(browser) == [f"pair-{r['id']}" for r in records]                        # the journal's order

    ascending = sorted(records, key=lambda r: r.get("wall_seconds", -math.inf))
    browser.click(_header("seconds") + " button")
    assert _rows(browser) == [f"pair-{r['id']}" for r in ascending]
    assert browser.evaluate(f"document.querySelector('{_header('seconds')}').getAttribute('aria-sort')") == "ascending"
    browser.click(_header("seconds") + " button")
    descending = sorted(ascending, key=lambda r: r.get("wall_seconds", -math.inf), reverse=True)
    assert _rows(browser) == [f"pair-{r['id']}" for r in descending]
    assert ascending != descending

    browser.click(_header("candidate") + " button")
    by_name = sorted(descending, key=lambda r: Path(r["candidate"]).name)
    assert _rows(browser) == [f"pair-{r['id']}" for r in by_name]
    browser.click(_header("violations") + " button")
    by_count = sorted(by_name, key=lambda r: sum(v["status"] == "confirmed" for v in r["verdicts"].values()))
    assert _rows(browser) == [f"pair-{r['id']}" for r in by_count]
    assert browser.errors == []


def test_every_link_resolves_in_a_moved_copy_of_the_audit_folder(audited, browser, tmp_path) -> None:
    moved = tmp_path / "moved <here> & there"
    shutil.copytree(audited, moved)
    browser.open((moved / "report.html").as_uri())
    links = browser.evaluate("Array.from(document.links).map(a => [a.getAttribute('href'), a.href])")
    targets = set()
    for raw, resolved in links:
        if raw.startswith("#"):
            assert browser.evaluate(f"document.getElementById({json.dumps(raw[1:])}) !== null"), raw
            continue
        assert resolved.startswith("file://"), resolved
        target = Path(unquote(urlparse(resolved).path))
        assert target.is_file() and moved in target.parents, (raw, target)
        targets.add(target)
    witnesses = {moved / "witnesses" / Path(v["witness"]).name for r in _records(audited)
                 for v in r["verdicts"].values() if v["status"] == "confirmed"}
    assert targets == witnesses and len(witnesses) == 3
    # Follow one witness link as a reader would: it opens the witness JSON.
    browser.click("table.sample a.witness", navigates=True)
    witness = json.loads(browser.evaluate("document.body.textContent"))
    assert witness["kanalyze_witness"] == 1 and witness["status"] == "confirmed"
    assert browser.errors == []


def test_summary_writes_the_report_again_where_html_says_with_the_sample_asked(audited, tmp_path, capsys) -> None:
    page = tmp_path / "pages" / "audit.html"
    command = ["audit", "--summary", str(audited), "--html", str(page), "--sample", "1", "--sample-seed", "7"]
    assert main(command) == 1
    assert f"report: {page}" in capsys.readouterr().out
    first = page.read_bytes()
    assert main(command) == 1 and page.read_bytes() == first                               # the same bytes
    text = first.decode()
    for href in re.findall(r'href="([^"#][^"]*)"', text):                                  # relative to the page
        assert (page.parent / unquote(href)).resolve().is_file(), href
    sampled = re.findall(r'<h3>([^<]*): (\d+) of (\d+) pairs</h3><table class="sample">.*?</table>', text)
    strata = hand_audit_sample(_records(audited), 1, 7)
    assert [(s, int(n), int(size)) for s, n, size in sampled] == \
        [(st["stratum"], len(st["pairs"]), st["size"]) for st in strata]
    assert [st["stratum"] for st in strata] == ["CMP001", "MEM002", NO_VIOLATION]
    assert main(["audit", "--summary", str(audited), "--sample", "-1"]) == 2


def _record(identifier: str, confirmed: list[str], **extra) -> dict:
    verdicts = {code: {"status": "confirmed" if code in confirmed else "refuted", "summary": "s",
                       "static_flag": False, "witness": None} for code in ("A001", "B001")}
    return {"id": identifier, "candidate": f"/c/{identifier}.py", "problem": "/p.py", "status": "done",
            "verdicts": verdicts, "static": [], "allclose": {"verdict": "PASS"}, **extra}


def test_the_hand_audit_sample_is_stratified_seeded_and_stable() -> None:
    records = [_record(f"{n:04x}", ["A001"] * (n % 3 == 0) + ["B001"] * (n % 10 == 0)) for n in range(40)]
    strata = {s["stratum"]: s for s in hand_audit_sample(records, 5, seed=0)}
    assert list(strata) == ["A001", "B001", NO_VIOLATION]
    assert [(s["size"], len(s["pairs"])) for s in strata.values()] == [(14, 5), (4, 4), (24, 5)]
    assert all(all(r["verdicts"][code]["status"] == "confirmed" for r in strata[code]["pairs"])
               for code in ("A001", "B001"))
    assert hand_audit_sample(records, 5, seed=0) == hand_audit_sample(list(reversed(records)), 5, seed=0)
    assert hand_audit_sample(records, 5, seed=1) != hand_audit_sample(records, 5, seed=0)
    # A journal that grows keeps its sampled pairs, but for those a new pair outranks.
    grown = {s["stratum"]: s for s in hand_audit_sample(records + [_record(f"x{n}", ["A001"]) for n in range(20)], 5)}
    old = {r["id"] for r in records}
    assert {r["id"] for r in grown["A001"]["pairs"]} & old <= {r["id"] for r in strata["A001"]["pairs"]}


def test_untrusted_text_is_escaped_everywhere(tmp_path) -> None:
    hostile = '<script>alert(1)</script>" onmouseover="alert(2)'
    record = _record("ab12", ["A001"], candidate=f"/c/{hostile}.py", metadata={"model": hostile},
                     static=[{"code": "A001", "row": 1, "message": hostile, "kernel": hostile}],
                     reason=hostile, allclose={"verdict": hostile, "detail": hostile})
    record["verdicts"]["A001"].update(summary=hostile, witness=f"/elsewhere/{hostile}.json")
    page = render(str(tmp_path), [record], str(tmp_path / "report.html"))
    assert page.count("<script") == 1 and "alert(1)</script>" not in page
    assert 'onmouseover="' not in page and "&lt;script&gt;alert(1)&lt;/script&gt;&quot; onmouseover=&quot;" in page
    assert "\u202e" not in render(str(tmp_path), [_record("cd34", [], candidate="/c/\u202eevil.py")],
                                  str(tmp_path / "report.html"))       # a bidi control shows as an escape
