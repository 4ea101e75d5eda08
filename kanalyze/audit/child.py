"""What a child process of the audit (a pair's worker, KernelBench's allclose check) does
so that it never outlives whoever started it (stdlib only)."""

from __future__ import annotations

import os
import signal
import threading
import time


def die_with_parent() -> None:
    """A watchdog thread: when the parent is gone, end this process, and its whole group when
    it leads one (started in a new session: whatever the candidate left running goes too)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        if os.getpgrp() == os.getpid():
            os.killpg(0, signal.SIGKILL)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def kill_group(process) -> None:
    """End `process` (a Popen started with start_new_session=True) and its group."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()
