"""The `kanalyze` pre-commit hook, run by the real pre-commit on real commits.

A copy of this checkout's working tree (tracked files and untracked ones git
does not ignore) is committed to a scratch repository, so that uncommitted
work is what gets tested; a second scratch repository uses it as a hook
repository by path and commits kernels through `pre-commit install`'s git
hook.  pre-commit builds the hook's environment with pip, from the package
index only (the hook needs the core install: no torch, no triton).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kernels import TF32_KERNEL

ROOT = Path(__file__).resolve().parent.parent

FIXED_KERNEL = TF32_KERNEL.replace("tl.dot(a, b)", 'tl.dot(a, b, input_precision="ieee")')
SUPPRESSED_KERNEL = TF32_KERNEL.replace("c = tl.dot(a, b)", "c = tl.dot(a, b)  # noqa: PRC001")


def test_hook_definition_matches_ruffs_conventions() -> None:
    [hook] = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "kanalyze"
    assert hook["entry"] == "kanalyze check --force-exclude"
    assert hook["language"] == "python"
    assert set(hook["types_or"]) == {"python", "pyi", "cuda"}
    assert hook["require_serial"] is True


def _git(cwd: Path, *args: str, env: dict[str, str]) -> str:
    result = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert result.returncode == 0, f"git {' '.join(args)}: {result.stderr}"
    return result.stdout


def _working_tree_copy(target: Path, env: dict[str, str]) -> str:
    """Copy the files git would commit from this checkout into a new repository; return its commit."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if not source.is_file():  # deleted in the working tree
            continue
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)
    _git(target, "init", "-q", env=env)
    _git(target, "add", "-A", env=env)
    _git(target, "commit", "-q", "-m", "kanalyze under test", env=env)
    return _git(target, "rev-parse", "HEAD", env=env).strip()


@pytest.mark.slow
def test_precommit_blocks_a_flagged_kernel_and_passes_it_fixed_or_suppressed(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"),  # not the user's ~/.cache
        "GIT_AUTHOR_NAME": "kanalyze tests", "GIT_AUTHOR_EMAIL": "tests@kanalyze.invalid",
        "GIT_COMMITTER_NAME": "kanalyze tests", "GIT_COMMITTER_EMAIL": "tests@kanalyze.invalid",
        "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,  # no hooksPath or templates of the machine's
    }
    env.pop("KANALYZE_OUTPUT_FORMAT", None)
    hook_repo = tmp_path / "kanalyze"
    hook_repo.mkdir()
    rev = _working_tree_copy(hook_repo, env)

    project = tmp_path / "project"
    project.mkdir()
    _git(project, "init", "-q", env=env)
    (project / ".pre-commit-config.yaml").write_text(yaml.safe_dump(
        {"repos": [{"repo": str(hook_repo), "rev": rev, "hooks": [{"id": "kanalyze"}]}]}))
    (project / "pyproject.toml").write_text('[tool.kanalyze]\nexclude = ["vendor"]\n')
    pre_commit = [sys.executable, "-m", "pre_commit"]
    installed = subprocess.run([*pre_commit, "install"], cwd=project, env=env, capture_output=True, text=True)
    assert installed.returncode == 0, installed.stdout + installed.stderr

    def commit(message: str) -> subprocess.CompletedProcess:
        _git(project, "add", "-A", env=env)
        return subprocess.run(["git", "commit", "-m", message], cwd=project, env=env,
                              capture_output=True, text=True, timeout=600)

    def commits() -> int:
        return int(_git(project, "rev-list", "--count", "HEAD", env=env))

    first = commit("configuration")  # builds the hook's environment; no kernel to check yet
    assert first.returncode == 0, first.stdout + first.stderr
    assert re.search(r"^kanalyze\.+\(no files to check\)Skipped$", first.stderr, re.MULTILINE), first.stderr
    assert commits() == 1

    # A kernel with a TF32 matmul, the same kernel under an excluded folder, and
    # two files that cannot be read as source: the commit is refused.
    (project / "kern.py").write_text(TF32_KERNEL)
    (project / "vendor").mkdir()
    (project / "vendor" / "kern.py").write_text(TF32_KERNEL)
    (project / "latin1.py").write_bytes(b"x = '\xe9t\xe9'\n")             # not UTF-8
    (project / "blob.py").write_bytes(b"\x7fELF\x00\x00\x01\x02" * 8)    # binary
    refused = commit("kernel with a defect")
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0, output
    assert commits() == 1
    assert "- hook id: kanalyze" in output and "- exit code: 1" in output
    assert "kern.py:10:9: PRC001 `tl.dot(a, b)`" in output
    # The unreadable files are reported, and the kernel after them is still checked.
    assert re.search(r"^latin1\.py:\d+:\d+: KAN000 ", output, re.MULTILINE), output
    assert re.search(r"^blob\.py:\d+:\d+: KAN000 binary file", output, re.MULTILINE), output
    assert "vendor/kern.py" not in output  # `exclude` applies to files pre-commit names (--force-exclude)

    (project / "kern.py").write_text(FIXED_KERNEL)
    (project / "latin1.py").unlink()
    (project / "blob.py").unlink()
    fixed = commit("kernel fixed")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert re.search(r"^kanalyze\.+Passed$", fixed.stdout + fixed.stderr, re.MULTILINE)
    assert commits() == 2

    (project / "kern.py").write_text(SUPPRESSED_KERNEL)
    suppressed = commit("TF32 on purpose")
    assert suppressed.returncode == 0, suppressed.stdout + suppressed.stderr
    assert re.search(r"^kanalyze\.+Passed$", suppressed.stdout + suppressed.stderr, re.MULTILINE)
    assert commits() == 3


def test_the_readmes_local_hook_works_as_written(tmp_path: Path) -> None:
    """The README's `.pre-commit-config.yaml` (a local hook using the kanalyze installed beside it),
    copied as it is, refuses a flagged kernel and passes it fixed."""
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```yaml\n(# \.pre-commit-config\.yaml[^\n]*\n.*?)```", readme, re.DOTALL)
    assert block, "the README shows a .pre-commit-config.yaml"
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"),
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
           "GIT_AUTHOR_NAME": "kanalyze tests", "GIT_AUTHOR_EMAIL": "tests@kanalyze.invalid",
           "GIT_COMMITTER_NAME": "kanalyze tests", "GIT_COMMITTER_EMAIL": "tests@kanalyze.invalid",
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    env.pop("KANALYZE_OUTPUT_FORMAT", None)
    project = tmp_path / "project"
    project.mkdir()
    _git(project, "init", "-q", env=env)
    (project / ".pre-commit-config.yaml").write_text(block.group(1))
    (project / "kern.py").write_text(TF32_KERNEL)

    def run_hooks() -> subprocess.CompletedProcess:
        _git(project, "add", "-A", env=env)
        return subprocess.run([sys.executable, "-m", "pre_commit", "run", "--all-files"], cwd=project, env=env,
                              capture_output=True, text=True, timeout=300)

    refused = run_hooks()
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "kern.py:10:9: PRC001" in refused.stdout
    (project / "kern.py").write_text(FIXED_KERNEL)
    passed = run_hooks()
    assert passed.returncode == 0, passed.stdout + passed.stderr
