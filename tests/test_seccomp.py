"""The seccomp filter of a candidate's worker (kanalyze/dynamic/sandbox/seccomp.py), in a fresh
process (no process can lift it): no new socket through Python or libc, on the thread that
installed it and on threads started before and after; socketpair() and pipes still work."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PROBE = textwrap.dedent("""
    import ctypes, json, os, socket, sys, threading
    from kanalyze.dynamic.sandbox import seccomp

    libc = ctypes.CDLL(None, use_errno=True)
    started = threading.Event(); go = threading.Event(); results = {}

    def libc_socket(family):
        fd = libc.socket(family, 1, 0)
        if fd >= 0:
            os.close(fd)
            return "opened"
        return os.strerror(ctypes.get_errno())

    def earlier():                       # a thread that was running when the filter came
        started.set(); go.wait()
        results["thread started before"] = libc_socket(1)

    thread = threading.Thread(target=earlier); thread.start(); started.wait()
    results["held"] = seccomp.deny_sockets()
    go.set(); thread.join()
    results["libc AF_UNIX"] = libc_socket(1)
    results["libc AF_INET"] = libc_socket(2)
    later = threading.Thread(target=lambda: results.__setitem__("thread started after", libc_socket(1)))
    later.start(); later.join()
    try:
        socket.socket(socket.AF_UNIX)
        results["python"] = "opened"
    except OSError as exc:
        results["python"] = exc.strerror
    a, b = socket.socketpair(); a.sendall(b"ok"); results["socketpair"] = b.recv(2).decode()
    r, w = os.pipe(); os.write(w, b"ok"); results["pipe"] = os.read(r, 2).decode()
    json.dump(results, sys.stdout)
""")


def test_no_new_socket_below_python_on_any_thread() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout)
    if not results["held"].startswith("socket() refused"):
        pytest.skip(f"no seccomp filter on this machine: {results['held']}")
    refused = "Permission denied"
    assert results == {"held": results["held"], "thread started before": refused, "libc AF_UNIX": refused,
                       "libc AF_INET": refused, "thread started after": refused, "python": refused,
                       "socketpair": "ok", "pipe": "ok"}, results
