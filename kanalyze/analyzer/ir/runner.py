"""Running compile workers: one process per batch of jobs, a timeout per
compilation, and a fresh process for the rest of the batch when one hangs or
crashes.

A job is one kernel launch context for one target; the worker expands it into
the kernel's autotune configurations and reports each one.  The parent turns
what the worker wrote (TTIR, PTX, cubin, the `ptxas -v` log) into a record:
text for the scanners, SASS from the cubin, and the kernel's resources.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from kanalyze.analyzer.ir import sass as sass_tools
from kanalyze.analyzer.ir.resources import Resources, parse_ptxas_log
from kanalyze.analyzer.ir.targets import Target

WORKER = Path(__file__).with_name("worker.py")
_BOOTSTRAP = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__')"
# Environment the worker keeps: enough to find Python, Triton and its tools.
_KEEP_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV")


def worker_env(scratch: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in _KEEP_ENV or k.startswith("TRITON_")}
    env["TRITON_CACHE_DIR"] = os.path.join(scratch, "triton-cache")
    env["CUDA_VISIBLE_DEVICES"] = ""  # compiling needs no GPU; never touch one
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _limit_resources() -> None:  # pragma: no cover - runs in the child
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


class _Worker:
    """One worker process and the thread that reads its protocol lines."""

    def __init__(self, module: str, out: str, jobs: list[dict], cwd: str) -> None:
        self.stderr = tempfile.TemporaryFile(dir=cwd)
        self.process = subprocess.Popen(
            [sys.executable, "-c", _BOOTSTRAP, str(WORKER)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, cwd=cwd,
            env=worker_env(cwd), start_new_session=True,
            preexec_fn=_limit_resources if os.name == "posix" else None,
        )
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        try:
            self.process.stdin.write(json.dumps({"module": module, "out": out, "jobs": jobs}).encode())
            self.process.stdin.close()
        except OSError:
            pass  # it died at once: the reader sees the end of its output

    def _read(self) -> None:
        for line in self.process.stdout:
            try:
                self.lines.put(json.loads(line))
            except ValueError:
                continue
        self.lines.put(None)

    def next(self, timeout: float) -> dict | None | str:
        """The next message, None at the end of output, "timeout" when none came in time."""
        try:
            return self.lines.get(timeout=max(timeout, 0.01))
        except queue.Empty:
            return "timeout"

    def stop(self) -> str:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (OSError, AttributeError):
                self.process.kill()
        self.process.wait()
        self.stderr.seek(0)
        tail = self.stderr.read()[-1500:].decode("utf-8", "replace")
        self.stderr.close()
        return tail


def _failure(message: str, *, timed_out: bool = False, crashed: bool = False) -> list[dict]:
    """A job that produced no result of its own (not cached: it may pass next time)."""
    return [{"index": 0, "ok": False, "error": message, "timed_out": timed_out, "crashed": crashed,
             "of": 1, "dropped": 0}]


def run_batch(module_text: str, module_name: str, jobs: list[dict], timeout_s: float) -> dict[str, list[dict]]:
    """Compile `jobs` against the scratch module; job id → worker results, with
    artifact files already read into records."""
    results: dict[str, list[dict]] = {}
    scratch = tempfile.mkdtemp(prefix="kanalyze-ir-")
    try:
        source_dir = os.path.join(scratch, "src")
        out = os.path.join(scratch, "out")
        os.makedirs(source_dir)
        os.makedirs(out)
        module = os.path.join(source_dir, module_name)
        with open(module, "w", encoding="utf-8") as handle:
            handle.write(module_text)
        pending = list(jobs)
        while pending:
            worker = _Worker(module, out, pending, scratch)
            current: str | None = None
            while True:
                message = worker.next(timeout_s)
                if message == "timeout":
                    worker.stop()
                    what = "compiling" if current else "importing the kernel's module"
                    failed = current or pending[0]["id"]
                    results[failed] = _failure(f"{what} did not finish within {timeout_s:g} s", timed_out=True)
                    pending = [j for j in pending if j["id"] != failed]
                    break
                if message is None:
                    tail = worker.stop()
                    if pending:
                        failed = current or pending[0]["id"]
                        last = " ".join(tail.strip().splitlines()[-2:]) if tail.strip() else ""
                        results[failed] = _failure(
                            f"the compile worker exited (code {worker.process.returncode})" + (f": {last}" if last else ""),
                            crashed=True)
                        pending = [j for j in pending if j["id"] != failed]
                    break
                event = message.get("event")
                if event == "fatal":
                    worker.stop()
                    for job in pending:
                        results[job["id"]] = [{**_failure(f"the kernel's module does not load: {message['error']}")[0],
                                               "crashed": False}]
                    pending = []
                    break
                if event == "config":
                    current = message["id"]
                elif event == "done":
                    results[message["id"]] = [_read_artifacts(r, module) for r in message["results"]]
                    pending = [j for j in pending if j["id"] != message["id"]]
                    current = None
                    if not pending:
                        worker.stop()
                        break
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return results


def _read_artifacts(result: dict, module: str) -> dict:
    """Replace the worker's file paths by what the scanners need."""
    record = {k: v for k, v in result.items() if k != "files"}
    record["module"] = module
    files = result.get("files") or {}

    def text(stage: str) -> str:
        path = files.get(stage)
        return Path(path).read_text(encoding="utf-8", errors="replace") if path else ""

    record["ptx"] = text("ptx")
    record["ttir"] = text("ttir")
    cubin = Path(files["cubin"]).read_bytes() if files.get("cubin") else b""
    record.update(describe_cubin(cubin, module, record.get("ptxas_log", ""), record.get("metadata") or {}))
    return record


def describe_cubin(cubin: bytes, module: str, ptxas_log: str, metadata: dict) -> dict:
    """SASS (compact) and resources of a cubin."""
    is_user = lambda path: path == module  # noqa: E731
    sass = sass_tools.disassemble(cubin) if cubin else None
    name = metadata.get("name")
    logged = parse_ptxas_log(ptxas_log)
    resources = logged.get(name) if name else (next(iter(logged.values())) if len(logged) == 1 else None)
    resources = resources or Resources()
    usage = sass_tools.resource_usage(cubin).get(name or "", {}) if cubin else {}
    if resources.registers is None and "REG" in usage:
        resources.registers = usage["REG"]
    if resources.stack_frame is None and "STACK" in usage:
        resources.stack_frame = usage["STACK"]
    if resources.static_shared is None and "SHARED" in usage:
        resources.static_shared = usage["SHARED"]
    if metadata.get("shared") is not None:
        resources.dynamic_shared = metadata["shared"]
    if metadata.get("num_warps"):
        resources.threads = metadata["num_warps"] * 32
    if metadata.get("tmem_size"):
        resources.tmem_columns = metadata["tmem_size"]
    return {
        "sass": sass_tools.compact(sass, is_user) if sass else "",
        "sass_tool": sass_tools.find_tool("nvdisasm") if sass else None,
        "resources": resources.to_dict(),
    }


def job_spec(context: dict, target: Target, job_id: str, max_configs: int) -> dict:
    """The worker's view of a compilation context."""
    keys = ("kernel", "names", "signature", "constexprs", "settings_values", "guesses", "options", "ints", "unresolved",
            "assumed_pointers")
    return {"id": job_id, "arch": target.capability, "max_configs": max_configs, **{k: context[k] for k in keys}}

