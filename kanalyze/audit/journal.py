"""The results journal: DIR/results.jsonl, one JSON object a line, one line per pair.

    journal = Journal(DIR)          takes DIR/results.lock (one audit per folder at a time)
    done = journal.load()           {pair id: record}; drops a torn last line from the file
    journal.append(record)          one line, flushed and fsynced before it returns
    journal.close()

Why it survives `kill -9`: a line is written with one `write` of the whole line,
newline last, then flushed and fsynced; a kill mid-write leaves a last line
without its newline, which `load` cuts off the file (the pair runs again).  A
complete line is never written twice: `load` keeps the first line of an id, and
the audit skips the ids it returns.  A write that fails (a full disk) is cut back
to where the line began, and raises `JournalError`: rerun once there is room.
"""

from __future__ import annotations

import fcntl
import json
import os

RESULTS = "results.jsonl"
LOCK = "results.lock"


class JournalError(Exception):
    pass


def read_records(path: str) -> tuple[list[dict], int, int]:
    """The complete records of a journal file (first line of each id), the byte length of
    its complete lines, and how many complete lines were not JSON objects (skipped)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return [], 0, 0
    except OSError as exc:
        raise JournalError(f"cannot read the journal {path}: {exc}") from exc
    complete = data[:data.rfind(b"\n") + 1]          # a torn last line has no newline
    records, seen, bad = [], set(), 0
    for line in complete.splitlines():
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            record = None
        if not isinstance(record, dict) or not isinstance(record.get("id"), str):
            bad += 1 if line.strip() else 0
            continue
        if record["id"] not in seen:
            seen.add(record["id"])
            records.append(record)
    return records, len(complete), bad


class Journal:
    def __init__(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, RESULTS)
        self._lock = open(os.path.join(directory, LOCK), "a")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            self._lock.close()
            raise JournalError(f"another audit is writing {self.path} (it holds {LOCK}); "
                               "wait for it or use another --output folder") from exc
        self._fd: int | None = None
        self.torn_bytes = 0        # what load() cut off the end of the file
        self.bad_lines = 0         # complete lines that were not records (kept, skipped)

    def load(self) -> dict[str, dict]:
        records, length, self.bad_lines = read_records(self.path)
        if os.path.exists(self.path):
            size = os.path.getsize(self.path)
            if size > length:                      # a torn last line: cut it off before appending
                self.torn_bytes = size - length
                with open(self.path, "r+b") as handle:
                    handle.truncate(length)
                    handle.flush()
                    os.fsync(handle.fileno())
        return {record["id"]: record for record in records}

    def append(self, record: dict) -> None:
        line = (json.dumps(record, sort_keys=True, ensure_ascii=False, default=str) + "\n").encode("utf-8")
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        start = os.fstat(self._fd).st_size
        try:
            written = 0
            while written < len(line):             # os.write may write part of it (a full disk)
                written += os.write(self._fd, line[written:])
            os.fsync(self._fd)
        except OSError as exc:
            try:
                os.ftruncate(self._fd, start)
            except OSError:
                pass                               # load() drops the torn line on the rerun
            raise JournalError(f"cannot write the journal {self.path}: {exc}; "
                               "make room and rerun the same command to resume") from exc

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._lock.close()

    def __enter__(self) -> "Journal":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
