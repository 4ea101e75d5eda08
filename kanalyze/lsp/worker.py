"""The static pass in a child process, one request at a time.

Why a process and not a thread: LibCST's native parser crashes the whole
interpreter on some inputs (a few thousand nested parentheses is enough), and
an editor sends whatever the user is typing.  In a child process such a
crash, or a hang, costs one document's diagnostics, never the server.  It
also keeps the analysis off the server's interpreter lock, so requests such
as hover are answered while a large file is being analyzed.

The wire format is one JSON object per line each way:
    request   {"id": 1, "path": "...", "text": "...", "kind": "python"}
    response  {"id": 1, "findings": [Finding.to_dict(), ...], "suppressed": 0}
          or  {"id": 1, "error": "..."}

The child keeps what it analyzed between requests (incremental.py), so an
edit re-analyzes only the kernels it touched.  `python -m kanalyze.lsp.worker`
runs the child side; `AnalysisWorker` is the server's side.  Nothing here
imports pygls.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from typing import Any


class WorkerFailed(Exception):
    """The child died (crash or timeout) while analyzing; it is restarted on the next request."""


class AnalysisWorker:
    """Runs the static pass (incremental.py) in a child process, restarting it when it dies.

    `analyze` blocks; the server calls it from a single background thread, so
    requests never overlap.
    """

    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self._process: subprocess.Popen | None = None
        self._next_id = 0
        self._lock = threading.Lock()

    def _start(self) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "kanalyze.lsp.worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None,  # stderr goes to the editor's log
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def start(self) -> None:
        """Start the child now (it imports the static pass), unless it is running."""
        with self._lock:
            self._running()

    def _running(self) -> subprocess.Popen:
        if self._process is None or self._process.poll() is not None:
            self._process = self._start()
        return self._process

    def analyze(self, path: str, text: str, kind: str,
                settings: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]], int]:
        with self._lock:
            process = self._running()
            self._next_id += 1
            request = {"id": self._next_id, "path": path, "text": text, "kind": kind, "settings": settings or {}}
            timed_out = threading.Event()

            def kill() -> None:
                timed_out.set()
                process.kill()

            watchdog = threading.Timer(self.timeout, kill)
            watchdog.daemon = True
            watchdog.start()
            try:
                assert process.stdin is not None and process.stdout is not None
                # ensure_ascii keeps lone surrogates (valid in JSON, not in UTF-8) intact.
                process.stdin.write(json.dumps(request).encode("ascii") + b"\n")
                process.stdin.flush()
                line = process.stdout.readline()
            except (BrokenPipeError, OSError):
                line = b""
            finally:
                watchdog.cancel()
            if not line:
                self._process = None
                process.kill()
                returncode = process.wait()
                if timed_out.is_set():
                    raise WorkerFailed(f"the static pass did not finish within {self.timeout:g} s")
                raise WorkerFailed(f"the static pass crashed on this text (exit status {returncode})")
            response = json.loads(line)
            if "error" in response:
                raise WorkerFailed(response["error"])
            return response["findings"], response["suppressed"]

    def close(self) -> None:
        """Stop the child: politely when it is idle, at once when an analysis
        nobody will read is still running."""
        process = self._process
        if process is None or process.poll() is not None:
            return
        if self._lock.acquire(timeout=1):
            try:
                assert process.stdin is not None
                try:
                    process.stdin.close()  # end of input: the child exits
                    process.wait(timeout=5)
                except (OSError, subprocess.TimeoutExpired):
                    process.kill()
                    process.wait()
                self._process = None
            finally:
                self._lock.release()
        else:
            process.kill()  # the analyzing thread sees the pipe close and gives up


def main() -> None:
    """The child: read requests from stdin, answer on stdout, until stdin closes.

    One IncrementalAnalyzer serves every request, so that an edit re-analyzes only
    the kernels it touched (incremental.py)."""
    from kanalyze.lsp.incremental import IncrementalAnalyzer

    analyzer = IncrementalAnalyzer()
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but responses may reach the server's pipe
    for line in sys.stdin.buffer:
        request = json.loads(line)
        try:
            # The proof ranges of the document's configuration; `proofs: False` skips z3.
            findings, suppressed = analyzer.analyze(request["path"], request["text"], request["kind"],
                                                    request.get("settings") or {})
            response = {"id": request["id"], "findings": [f.to_dict() for f in findings], "suppressed": suppressed}
        except Exception as exc:  # a bug in the pass: report it for this document, keep serving
            response = {"id": request["id"], "error": f"internal error: {type(exc).__name__}: {exc}"}
        out.write(json.dumps(response).encode("ascii") + b"\n")
        out.flush()


if __name__ == "__main__":
    main()
