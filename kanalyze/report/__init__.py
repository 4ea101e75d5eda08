"""Report writers: the same findings as text (full or concise), JSON, SARIF 2.1.0 or GitHub annotations.

Each writer takes the findings (and, where the format carries them, the rule
metadata) and returns a string; the CLI decides where it goes.  All of them take
a finding's severity from `Finding.severity`, and the summary line and the exit
code are counted once, in summary.py.
"""

from __future__ import annotations

from kanalyze.report.github import render_github
from kanalyze.report.json import render_json
from kanalyze.report.sarif import render_sarif
from kanalyze.report.summary import Summary
from kanalyze.report.text import render_statistics, render_text

# `text` is `concise` (one line per finding), kept for compatibility; `full` adds the source.
FORMATS = ("full", "concise", "text", "json", "sarif", "github")

__all__ = ["FORMATS", "Summary", "render_github", "render_json", "render_sarif", "render_statistics", "render_text"]
