"""Long passes show a progress bar on a terminal: "files" for the static pass, "compiling"
for `--ir`, "gates" for `--dynamic`.  Not on a pipe, not with `-q`, and the bar vanishes
when its pass ends, so the report is the same with it or without.

The command runs as a user runs it, `python -m kanalyze check`, with its stderr on a real
pseudo-terminal (os.openpty); what rich draws there is read back from the terminal's
other end.  The passes' `progress` callbacks are checked in-process as well, through the
pool, the serial path, the crash retry and the cache.
"""

from __future__ import annotations

import faulthandler
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from importlib.util import find_spec
from pathlib import Path

import pytest

from kanalyze.check import run_static
from kanalyze.config import Config

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
LINUX = sys.platform.startswith("linux")
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
ERASE_LINE = "\x1b[2K"

KERNEL = '''\
import triton
import triton.language as tl


@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + offs[:, None] * BLOCK + offs[None, :])
    b = tl.load(b_ptr + offs[:, None] * BLOCK + offs[None, :])
    c = tl.dot(a, b)
    tl.store(c_ptr + offs[:, None] * BLOCK + offs[None, :], c)
'''


def _nvcc() -> str | None:
    from kanalyze.analyzer.ir.nvcc import find_nvcc

    return find_nvcc()


needs_nvcc = pytest.mark.skipif(_nvcc() is None, reason="nvcc is not installed: no CUDA unit to compile")
needs_triton = pytest.mark.skipif(find_spec("triton") is None,
                                  reason="triton is not installed: no Triton kernel to compile")
needs_pty = pytest.mark.skipif(not hasattr(os, "openpty") or sys.platform == "win32",
                               reason="no pseudo-terminals on this platform")


def _check(*argv: str, cwd: Path, terminal: bool, timeout: float = 60) -> tuple[int, str, str]:
    """`python -m kanalyze check ARGV` in `cwd`: (exit code, stdout, stderr).  `terminal`:
    stderr is a pseudo-terminal's slave end, and what comes back is what reached the terminal."""
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")}
    env.update(TERM="xterm-256color", COLUMNS="120", LINES="40", PYTHONPATH=str(ROOT),
               KANALYZE_CACHE_DIR=str(cwd / ".cache"))
    command = [sys.executable, "-m", "kanalyze", "check", *argv]
    if not terminal:
        done = subprocess.run(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=timeout)
        return done.returncode, done.stdout.decode(), done.stderr.decode()
    master, slave = os.openpty()
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every holder of the slave end has closed it
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=slave)
        os.close(slave)
        out, _ = process.communicate(timeout=timeout)
        reader.join(timeout=10)
    finally:
        os.close(master)
    return process.returncode, out.decode(), b"".join(chunks).decode(errors="replace")


def _shown(terminal: str) -> str:
    """What a terminal's bytes say, without rich's colours and cursor moves."""
    return ESCAPES.sub("", terminal.replace("\r", "\n"))


def _kernels_dir(tmp_path: Path, count: int) -> Path:
    """`count` fixture files with Triton kernels, plus one Python file with none (nothing to analyze)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text("[tool.kanalyze]\n")
    chosen = [p for p in sorted((FIXTURES / "triton").glob("*.py")) if "@triton.jit" in p.read_text()][:count]
    assert len(chosen) == count
    for path in chosen:
        shutil.copy(path, project / path.name)
    (project / "helpers.py").write_text("def scale(x):\n    return 2 * x\n")
    return project


# --- on the terminal --------------------------------------------------------------

@needs_pty
def test_the_files_bar_on_a_terminal_counts_every_file_and_vanishes(tmp_path: Path) -> None:
    """Nine files with kernels through the pool (two workers), then again from the cache:
    each run draws "files" up to 9/9 (the file without a kernel is not counted) and erases
    it; the report on stdout is the one a pipe gets."""
    project = _kernels_dir(tmp_path, 9)
    for run in ("cold", "warm"):
        code, out, terminal = _check(".", "--jobs", "2", cwd=project, terminal=True)
        shown = _shown(terminal)
        assert "files" in shown and "9/9" in shown, (run, shown[-2000:])
        assert "/10" not in shown, run  # the file without a kernel is not one of them
        assert ERASE_LINE in terminal[terminal.rindex("9/9"):], (run, "the bar is left on the terminal")
        piped_code, piped_out, piped_err = _check(".", "--jobs", "2", cwd=project, terminal=False)
        assert (code, out) == (piped_code, piped_out) and "Found" in out, run
    assert list((project / ".cache").iterdir()), "the warm run had no cache to read"


@needs_pty
def test_the_files_bar_without_a_pool(tmp_path: Path) -> None:
    """Three files, analyzed one after the other in this process: the bar reaches 3/3."""
    project = _kernels_dir(tmp_path, 3)
    _, _, terminal = _check(".", "--no-cache", "--jobs", "1", cwd=project, terminal=True)
    shown = _shown(terminal)
    assert "files" in shown and "3/3" in shown, shown[-2000:]


@needs_pty
def test_no_bar_with_quiet_on_a_terminal(tmp_path: Path) -> None:
    project = _kernels_dir(tmp_path, 3)
    code, out, terminal = _check(".", "--no-cache", "--jobs", "1", "-q", cwd=project, terminal=True)
    assert "3/3" not in _shown(terminal) and "files" not in _shown(terminal), terminal
    assert "\x1b[" not in terminal
    assert code == 1 and out.strip()  # the findings are there: the run did run


def test_no_bar_on_a_pipe(tmp_path: Path) -> None:
    project = _kernels_dir(tmp_path, 3)
    code, out, err = _check(".", "--no-cache", "--jobs", "1", cwd=project, terminal=False)
    assert "3/3" not in err and "files" not in err and "\x1b[" not in err, err
    assert code == 1 and out.strip()


@needs_pty
@needs_nvcc
def test_the_compiling_bar_for_a_cuda_unit(tmp_path: Path) -> None:
    """`--ir` on a .cu file: nvcc compiles it for the one default target, one job: "compiling"
    reaches 1/1 on a terminal; on a pipe there is only the IR stage's note."""
    shutil.copy(FIXTURES / "ir" / "cuda_kernels.cu", tmp_path / "cuda_kernels.cu")
    (tmp_path / "pyproject.toml").write_text("[tool.kanalyze]\n")
    code, out, terminal = _check("--ir", "--no-cache", "cuda_kernels.cu", cwd=tmp_path, terminal=True)
    shown = _shown(terminal)
    assert "compiling" in shown and "1/1" in shown and "cuda_kernels.cu" in shown, shown[-2000:]
    assert "IR: 1 kernel configurations compiled" in shown  # the note comes after the bar, not inside it
    piped_code, piped_out, piped_err = _check("--ir", "--no-cache", "cuda_kernels.cu", cwd=tmp_path, terminal=False)
    assert "compiling" not in piped_err and "1/1" not in piped_err and "\x1b[" not in piped_err, piped_err
    assert (code, out) == (piped_code, piped_out) and "PRC002" in out


@needs_pty
@needs_triton
def test_the_compiling_bar_for_a_triton_kernel(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.kanalyze]\n")
    (tmp_path / "mm.py").write_text(KERNEL + "\n\ndef mm(a, b, c):\n    mm_kernel[(1,)](a, b, c, BLOCK=32)\n")
    _, _, terminal = _check("--ir", "--no-cache", "mm.py", cwd=tmp_path, terminal=True)
    shown = _shown(terminal)
    assert "compiling" in shown and re.search(r"\b([1-9]\d*)/\1\b", shown.split("compiling", 1)[1]), shown[-2000:]


# --- the callbacks ----------------------------------------------------------------------

def _recorder() -> tuple[list[tuple[str, int, int]], object]:
    calls: list[tuple[str, int, int]] = []
    return calls, lambda name, done, total: calls.append((name, done, total))


def _assert_told_of(calls: list[tuple[str, int, int]], names: set[str]) -> None:
    """The total first with nothing done, then each file once, one more each time."""
    total = len(names)
    assert calls[0] == ("", 0, total)
    assert [done for _, done, _ in calls[1:]] == list(range(1, total + 1))
    assert {t for _, _, t in calls} == {total}
    assert sorted(name for name, _, _ in calls[1:]) == sorted(names)


def _kernel_files(tmp_path: Path, count: int) -> set[str]:
    (tmp_path / "pyproject.toml").write_text("[tool.kanalyze]\n")
    (tmp_path / "plain.py").write_text("x = 1\n")
    for i in range(count):
        (tmp_path / f"kern_{i}.py").write_text(KERNEL)
    return {f"kern_{i}.py" for i in range(count)}


@pytest.mark.parametrize("jobs", [1, 2], ids=["serial", "pool"])
def test_run_static_tells_of_each_file_then_of_each_cached_file(tmp_path: Path, monkeypatch, jobs: int) -> None:
    monkeypatch.chdir(tmp_path)
    names = _kernel_files(tmp_path, 9)
    config = Config(root=str(tmp_path), cache_dir=str(tmp_path / ".cache"))
    for run in ("cold", "warm"):
        calls, progress = _recorder()
        result = run_static([str(tmp_path)], config, jobs=jobs, progress=progress)
        assert result.files_from_cache == (9 if run == "warm" else 0), run
        _assert_told_of(calls, names)


def test_run_static_without_a_progress_callback_is_unchanged(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    _kernel_files(tmp_path, 9)
    with_bar = run_static([str(tmp_path)], Config(root=str(tmp_path)), use_cache=False, jobs=2,
                          progress=lambda *_: None)
    without = run_static([str(tmp_path)], Config(root=str(tmp_path)), use_cache=False, jobs=2)
    assert [f.to_dict() for f in with_bar.findings] == [f.to_dict() for f in without.findings]
    assert {f.code for f in without.findings} == {"PRC001"}


@pytest.mark.skipif(not LINUX, reason="the patched analysis reaches the workers through fork")
def test_run_static_tells_of_the_files_a_crashed_pool_runs_again(tmp_path: Path, monkeypatch) -> None:
    """A worker that dies breaks the pool; the files of its unfinished batches run again, each
    in a process of its own, and are told of then: every file once, the culprit included."""
    import kanalyze.check.static as static

    monkeypatch.chdir(tmp_path)
    names = _kernel_files(tmp_path, 9) | {"crash.py"}
    (tmp_path / "crash.py").write_text(KERNEL)
    real = static.analyze_source

    def analyze(path: str, text: str, **kw):
        if path.endswith("crash.py"):
            faulthandler.disable()  # pytest's handler would print the worker's stack
            os.kill(os.getpid(), signal.SIGSEGV)
        return real(path, text, **kw)

    monkeypatch.setattr(static, "analyze_source", analyze)
    calls, progress = _recorder()
    result = run_static([str(tmp_path)], Config(root=str(tmp_path)), use_cache=False, jobs=2, progress=progress)
    assert any(f.code == "KAN001" and f.location.file.endswith("crash.py") for f in result.findings)
    _assert_told_of(calls, names)


@needs_nvcc
def test_analyze_ir_tells_of_each_cuda_unit_and_target(monkeypatch, tmp_path: Path) -> None:
    from kanalyze.analyzer.ir.artifacts import ArtifactCache
    from kanalyze.analyzer.ir.nvcc import CudaSource
    from kanalyze.analyzer.ir.settings import load_settings
    from kanalyze.analyzer.ir.stage import analyze_ir

    monkeypatch.chdir(tmp_path)
    units = [CudaSource(f"__global__ void k{i}(float* x) {{ x[{i}] = 1.0f; }}\n", str(tmp_path / f"k{i}.cu"))
             for i in range(2)]
    settings = load_settings({}, ["sm_80", "sm_90"], False)
    calls, progress = _recorder()
    run = analyze_ir([], settings, ArtifactCache.disabled(), cuda=units, progress=progress)
    assert all(k.ok for f in run.files for k in f.kernels) and run.compiled == 4
    assert calls[0] == ("", 0, 4) and [done for _, done, _ in calls[1:]] == [1, 2, 3, 4]
    assert sorted(name for name, _, _ in calls[1:]) == ["k0.cu", "k0.cu", "k1.cu", "k1.cu"]


def test_analyze_ir_without_nvcc_tells_nothing(monkeypatch) -> None:
    from kanalyze.analyzer.ir import stage
    from kanalyze.analyzer.ir.artifacts import ArtifactCache
    from kanalyze.analyzer.ir.nvcc import CudaSource
    from kanalyze.analyzer.ir.settings import IRSettings

    monkeypatch.setattr(stage, "find_nvcc", lambda: None)
    calls, progress = _recorder()
    run = stage.analyze_ir([], IRSettings(), ArtifactCache.disabled(), cuda=[CudaSource("__global__ void k() {}\n",
                                                                                        "/p/k.cu")], progress=progress)
    assert calls == [] and len(run.notes) == 1 and "nvcc was not found" in run.notes[0]
