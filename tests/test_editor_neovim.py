"""A real Neovim, headless, set up with the exact Lua block docs/editors.md gives.

The block is read out of the markdown, so the page and this test cannot drift
apart.  Neovim opens a copy of a Triton fixture with a planted defect, waits for
kanalyze's diagnostics, asks for the code actions on the defect's line, applies
the kanalyze fix it is offered, and writes what it saw as JSON.  The diagnostics
must be what `kanalyze check --output-format json` reports for the same text
(codes, ranges, severities), before and after the fix, and the fixed buffer must
be what `kanalyze check --fix --unsafe-fixes` writes.

`nvim` is found on PATH (or KANALYZE_TEST_NVIM names the binary); .ci/run
installs Debian's neovim where it is missing.  The test skips only when there is
no nvim at all.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "fixtures" / "triton" / "prc002_fp16_accumulator_gemm.py"
NVIM = os.environ.get("KANALYZE_TEST_NVIM") or shutil.which("nvim")
SEVERITY = {"error": 1, "warning": 2, "note": 3}  # Severity -> vim.diagnostic.severity

pytestmark = pytest.mark.skipif(NVIM is None, reason="no nvim on PATH (apt-get install neovim)")

# Runs after init.lua (the documented block) and the fixture are loaded.  It never
# raises: whatever goes wrong is written to the JSON as `error`, and Neovim quits.
DRIVER = r"""
local out = { before = {}, actions = {}, after = {} }
local function diagnostics(buf)
  local seen = {}
  for _, d in ipairs(vim.diagnostic.get(buf)) do
    table.insert(seen, { code = d.code, source = d.source, severity = d.severity, lnum = d.lnum,
                         col = d.col, end_lnum = d.end_lnum, end_col = d.end_col })
  end
  return seen
end
local ok, err = pcall(function()
  local buf = vim.api.nvim_get_current_buf()
  local line = tonumber(vim.env.KANALYZE_DEFECT_LINE)
  local function flagged_at_line()
    for _, d in ipairs(vim.diagnostic.get(buf)) do
      if d.lnum == line then return true end
    end
    return false
  end
  out.filetype = vim.bo[buf].filetype
  out.arrived = vim.wait(15000, flagged_at_line, 50)
  out.before = diagnostics(buf)
  local params = { textDocument = { uri = vim.uri_from_bufnr(buf) },
                   range = { start = { line = line, character = 0 }, ["end"] = { line = line + 1, character = 0 } },
                   context = { diagnostics = {} } }
  local fix
  for _, response in pairs(vim.lsp.buf_request_sync(buf, "textDocument/codeAction", params, 10000) or {}) do
    for _, action in ipairs(response.result or {}) do
      table.insert(out.actions, action.title)
      if fix == nil and action.title:match("^Fix ") then fix = action end
    end
  end
  if fix ~= nil then
    vim.lsp.util.apply_workspace_edit(fix.edit, "utf-16")
    out.fixed = vim.wait(15000, function() return not flagged_at_line() end, 50)
    vim.wait(1000, function() return false end, 50) -- any later publish of the same text lands
    out.after = diagnostics(buf)
    out.text = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, true), "\n") .. "\n"
  end
end)
if not ok then out.error = tostring(err) end
vim.fn.writefile({ vim.fn.json_encode(out) }, vim.env.KANALYZE_NVIM_OUT)
vim.cmd("qa!")
"""


def documented_lua() -> str:
    """The Lua block of docs/editors.md's Neovim section, as users copy it."""
    page = (ROOT / "docs" / "editors.md").read_text(encoding="utf-8")
    section = page.split("\n## Neovim\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```lua\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the Neovim section should give one Lua block"
    return blocks[0]


def kanalyze(path: Path, *args: str) -> str:
    """`python -m kanalyze check ARGS PATH` of this tree; its stdout."""
    result = subprocess.run([sys.executable, "-m", "kanalyze", "check", *args, str(path)], capture_output=True,
                            text=True, cwd=path.parent, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode in (0, 1), result.stderr
    return result.stdout


def check(path: Path) -> list[dict]:
    return json.loads(kanalyze(path, "--output-format", "json"))


def as_seen_in_neovim(findings: list[dict]) -> list[tuple]:
    """check's findings as Neovim holds diagnostics: 0-based rows, byte columns (the file is ASCII)."""
    return sorted((f["code"], "kanalyze", SEVERITY[f["severity"]], f["location"]["row"] - 1,
                   f["location"]["column"] - 1, f["end_location"]["row"] - 1, f["end_location"]["column"] - 1)
                  for f in findings)


def seen(diagnostics: list[dict]) -> list[tuple]:
    return sorted((d["code"], d["source"], d["severity"], d["lnum"], d["col"], d["end_lnum"], d["end_col"])
                  for d in diagnostics)


def run_neovim(tmp_path: Path, kernel: Path, defect_row: int) -> dict:
    """Neovim with the documented init.lua opens `kernel`; what the driver wrote."""
    shim = tmp_path / "bin" / "kanalyze"  # the doc's `kanalyze` is this tree's, run by this Python
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m kanalyze "$@"\n')
    shim.chmod(0o755)
    (tmp_path / "init.lua").write_text(documented_lua())
    (tmp_path / "driver.lua").write_text(DRIVER)
    out = tmp_path / "seen.json"
    home = tmp_path / "home"  # no user config, plugins, shada or state leak in
    env = {**os.environ, "PATH": f"{shim.parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(ROOT), "HOME": str(home), "XDG_CONFIG_HOME": str(home / "config"),
           "XDG_DATA_HOME": str(home / "data"), "XDG_STATE_HOME": str(home / "state"),
           "XDG_CACHE_HOME": str(home / "cache"), "KANALYZE_NVIM_OUT": str(out),
           "KANALYZE_DEFECT_LINE": str(defect_row - 1)}
    env.pop("NVIM", None)  # set inside a Neovim terminal; the child would talk to that Neovim
    result = subprocess.run([NVIM, "--headless", "-u", str(tmp_path / "init.lua"), "-i", "NONE", kernel.name,
                             "-c", f"luafile {tmp_path / 'driver.lua'}"],
                            cwd=kernel.parent, env=env, capture_output=True, text=True, timeout=60,
                            stdin=subprocess.DEVNULL)
    logs = "\n".join(p.read_text(errors="replace")[-3000:] for p in home.rglob("lsp.log"))
    assert out.exists(), f"nvim wrote nothing (exit {result.returncode}):\n{result.stderr}\n{logs}"
    data = json.loads(out.read_text())
    assert "error" not in data, f"{data['error']}\n{logs}"
    data["log"] = logs
    return data


def test_documented_neovim_config_shows_checks_findings_and_applies_a_fix(tmp_path: Path) -> None:
    project = tmp_path / "project"  # outside the repository, whose pyproject.toml excludes fixtures/
    project.mkdir()
    kernel = project / "gemm.py"
    shutil.copyfile(FIXTURE, kernel)
    expected = check(kernel)
    assert expected, "the fixture should have findings"
    defect_row = expected[0]["location"]["row"]

    data = run_neovim(tmp_path, kernel, defect_row)

    assert data["filetype"] == "python"
    assert data["arrived"], f"no diagnostic on line {defect_row} within 15 s: {data['before']}\n{data['log']}"
    assert seen(data["before"]) == as_seen_in_neovim(expected)

    code = expected[0]["code"]
    assert f"Suppress {code} on this line (# noqa: {code})" in data["actions"]
    assert any(title.startswith(f"Explain {code}") for title in data["actions"])
    fixes = [title for title in data["actions"] if title.startswith(f"Fix {code}: ")]
    assert fixes, f"no kanalyze fix among the code actions: {data['actions']}"

    assert data["fixed"], f"the diagnostic on line {defect_row} stayed after the fix: {data['after']}"
    fixed_in_neovim = tmp_path / "fixed_in_neovim" / "gemm.py"
    fixed_in_neovim.parent.mkdir()
    fixed_in_neovim.write_text(data["text"])
    assert seen(data["after"]) == as_seen_in_neovim(check(fixed_in_neovim))
    kanalyze(kernel, "--fix", "--unsafe-fixes")  # the one fix the file has, as the command line applies it
    assert data["text"] == kernel.read_text()
