"""The clause pages in docs/rules/ are what the rules say, and the docs name what exists."""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import pytest
import yaml

from kanalyze.cli import main
from kanalyze.rules import all_rules

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _generator():
    spec = importlib.util.spec_from_file_location("docs_generate", DOCS / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_pages_match_the_generator() -> None:
    problems = _generator().differences(_generator().render())
    assert not problems, "\n".join(problems + ["run `python docs/generate.py`"])


@pytest.mark.parametrize("rule", all_rules(), ids=lambda rule: rule.code)
def test_each_page_is_what_kanalyze_explain_prints(rule, capsys) -> None:
    assert main(["explain", rule.code]) == 0
    printed = capsys.readouterr().out
    assert (DOCS / "rules" / f"{rule.code}.md").read_text(encoding="utf-8") == printed


def test_the_check_notices_an_edited_a_missing_and_a_stale_page(tmp_path: Path) -> None:
    generator = _generator()
    pages = generator.render()
    copy = tmp_path / "rules"
    shutil.copytree(DOCS / "rules", copy)
    assert generator.differences(pages, copy) == []
    (copy / "PRC002.md").write_text("# PRC002\n\nedited by hand\n")
    (copy / "PRC001.md").unlink()
    (copy / "XYZ999.md").write_text("# a clause that was removed\n")
    problems = generator.differences(pages, copy)
    assert f"out of date: {copy / 'PRC002.md'}" in problems
    assert f"missing: {copy / 'PRC001.md'}" in problems
    assert f"no such clause any more: {copy / 'XYZ999.md'}" in problems


def test_index_links_every_clause_and_its_help_uri() -> None:
    index = (DOCS / "rules" / "index.md").read_text(encoding="utf-8")
    for rule in all_rules():
        assert f"[{rule.code}]({rule.code}.md)" in index
        assert rule.help_uri() in index


def test_editor_and_precommit_pages_name_what_exists() -> None:
    """The settings, command and hook ids the pages tell users to write are the real ones."""
    from kanalyze.lsp.server import EXPLAIN_COMMAND, Settings

    editors = (DOCS / "editors.md").read_text(encoding="utf-8")
    for setting in ("select", "ignore", "ir", "debounce"):
        assert f"`{setting}`" in editors
    assert _accepted_keys(Settings) == {"select", "ignore", "ir", "debounce"}
    assert EXPLAIN_COMMAND in editors
    assert "kanalyze lsp" in editors or '"lsp"' in editors

    precommit = (DOCS / "pre-commit.md").read_text(encoding="utf-8")
    hooks = {hook["id"]: hook for hook in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    for hook_id in re.findall(r"- id: ([\w-]+)", precommit):
        assert hook_id in hooks or hook_id == "kanalyze-ir", f"docs/pre-commit.md names an unknown hook {hook_id}"
    assert "kanalyze-ir" not in hooks  # documented as coming with the IR stage, not shipped yet
    assert hooks["kanalyze"]["entry"] in precommit


def _accepted_keys(settings_class) -> set[str]:
    """The keys Settings.merged takes without complaint."""
    accepted = set()
    for key, value in {"select": ["PRC"], "ignore": ["PRC001"], "ir": False, "debounce": 10, "bogus": 1}.items():
        _, problems = settings_class().merged({key: value})
        if not problems:
            accepted.add(key)
    return accepted
