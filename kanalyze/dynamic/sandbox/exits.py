"""A worker's end in words: its exit status, and for kanalyze's own failures the exception (stdlib only)."""

from __future__ import annotations

import signal

# Exit codes worker.py ends with, and what they mean.
_CODES = {3: "it could not start", 4: "the device faulted", 70: "an exception escaped kanalyze's worker code"}
_SIGNALS = {"SIGKILL": "killed: out of memory?", "SIGSEGV": "segmentation fault", "SIGXFSZ": "file size limit",
            "SIGABRT": "aborted"}


def describe(code: int | None, output: str, lost: bool = False, started: bool = False) -> str:
    """`code` as `subprocess` gives it (negative: the signal); `output` the worker's stdout/stderr tail;
    `started`: the worker had said it was ready (code 3 then is not worker.py's: code that ran in
    it exited so)."""
    if code is None:
        if lost:
            return "the worker ended; its exit status was lost with the zygote that forked it"
        return "the worker stopped answering"
    if code < 0:
        return f"the worker died of {signal_words(code)}"
    why = _CODES.get(code) if not (started and code == 3) else None
    if code == 70:   # the traceback worker.py printed: its last line says which exception
        last = exception_line(output)
        lines = [line.strip() for line in output.splitlines() if line.strip()]
        if last:
            why = f"{why}: {last}"
        elif lines:   # no traceback in sight: what it said last is the best clue left
            why = f"{why}; its last output: {lines[-1][:200]}"
    return f"the worker exited with code {code}" + (f" ({why})" if why else "")


def signal_words(code: int) -> str:
    """A death by signal (`code` as `subprocess` gives it, negative) in words: its name, and
    what it most likely means."""
    name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
    why = _SIGNALS.get(name)
    return name + (f" ({why})" if why else "")


def exception_line(output: str) -> str | None:
    """The last `SomeError: message` line of a worker's output (a traceback's last line), shortened."""
    for line in reversed(output.splitlines()[-40:]):
        name = line.split(":", 1)[0].strip().rsplit(".", 1)[-1]   # numpy._core._exceptions._ArrayMemoryError
        if name.isidentifier() and name.endswith(("Error", "Exception", "Interrupt")):
            return line.strip()[:300]
    return None
