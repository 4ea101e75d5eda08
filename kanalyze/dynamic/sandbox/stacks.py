"""Where a reference worker is when it does not answer (stdlib only).

A job the reference worker does not answer in its time (reference_jobs.py) is kanalyze's
failure, and "it did not answer within 120 s" alone says nothing of why.  The reference
worker runs the problem, which is trusted, and kanalyze's own code; it registers
`faulthandler` on SIGUSR1 (`register`), so that before the parent kills it, it is asked
where it is (`where`): Python's stack of every thread goes to its output, and the job
loop's innermost frames go into the message, e.g.

    it did not answer within 120 s (at float64.py:48 _run < float64.py:27 float64_reference)

A frame in C (a device synchronisation, a lock) shows as the Python line that called it.
A candidate's worker is never asked: what it prints is the candidate's to write.
"""

from __future__ import annotations

import os
import re
import signal
import time

SIGNAL = signal.SIGUSR1
JOB_LOOP = "_serve_jobs"     # worker.py's job loop: frames below it are the worker's start
WAIT_SECONDS = 2.0           # how long the dump may take to reach the parent's drain
FRAMES = 6                   # innermost frames said in the message

_HEADER = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+ .*most recent call first", re.MULTILINE)
_FRAME = re.compile(r'^\s+File "(?P<path>[^"]*)", line (?P<line>\d+) in (?P<function>\S+)', re.MULTILINE)


def register() -> None:
    """In the reference worker: dump every thread's stack to stderr on SIGUSR1."""
    import faulthandler
    import sys

    faulthandler.register(SIGNAL, file=sys.stderr, all_threads=True)


def where(worker) -> str:
    """" (at FRAME < FRAME ...)" for a live reference worker (process.Worker) that answers
    SIGUSR1 in time, else ""."""
    if worker.role != "reference" or worker.process.poll() is not None:
        return ""
    dumps = len(_HEADER.findall(worker.output()))
    try:
        os.kill(worker.process.pid, SIGNAL)
    except OSError:
        return ""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        time.sleep(0.1)
        if len(_HEADER.findall(worker.output())) > dumps:
            time.sleep(0.2)   # the rest of the dump, written in one go
            frames = innermost(worker.output())
            return f" (at {frames})" if frames else ""
    return ""


def innermost(output: str) -> str:
    """The job loop's innermost frames in the last faulthandler dump of `output`, innermost first."""
    starts = [m.start() for m in _HEADER.finditer(output)]
    blocks = [output[a:b] for a, b in zip(starts, starts[1:] + [len(output)])]
    looping = [b for b in blocks if JOB_LOOP in b]
    chosen = looping[-1] if looping else (blocks[-1] if blocks else "")
    frames = []
    for match in _FRAME.finditer(chosen):
        if match["function"] == JOB_LOOP:
            break
        frames.append(f"{match['path'].rsplit('/', 1)[-1]}:{match['line']} {match['function']}")
    return " < ".join(frames[:FRAMES])
