"""The documents the server analyzes: what it knows of each, and when a change
is analyzed.

didOpen and didSave analyze at once; didChange is debounced: a change after a
quiet spell (no change for the debounce delay) is analyzed at once, a burst of
changes is analyzed once, the debounce delay after its last change.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Callable, Iterator

from lsprotocol import types
from pygls.uris import to_fs_path

from kanalyze.findings import Finding
from kanalyze.lsp.analysis import document_kind


@dataclass
class Published:
    """The analysis behind the diagnostics last published for a document."""

    key: tuple                     # (version, configuration stamp, witnesses) it was made from
    version: int | None
    lines: list[str]
    findings: list[Finding]
    diagnostics: list[types.Diagnostic]   # one per finding, in the same order


@dataclass
class DocState:
    uri: str
    path: str                      # on disk, or the URI itself for a buffer without a file
    is_file: bool
    kind: str
    last_change: float = float("-inf")
    timer: asyncio.TimerHandle | None = None
    in_flight: int = 0
    published: Published | None = None

    def cancel_timer(self) -> None:
        """Drop the analysis a debounced change has waiting, if any."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


class Documents:
    """The open documents of a kind the analyzer reads, by URI."""

    def __init__(self) -> None:
        self._states: dict[str, DocState] = {}

    def __contains__(self, uri: str) -> bool:
        return uri in self._states

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._states))

    def get(self, uri: str) -> DocState | None:
        return self._states.get(uri)

    def open(self, uri: str, language_id: str | None) -> DocState | None:
        """Start following a document; None (and nothing kept) for one the analyzer has nothing to say about."""
        path = to_fs_path(uri) if uri.startswith("file:") else None
        kind = document_kind(path or uri, language_id)
        if kind is None:
            return None
        state = DocState(uri=uri, path=path or uri, is_file=path is not None, kind=kind)
        self._states[uri] = state
        return state

    def close(self, uri: str) -> DocState | None:
        """Stop following a document; its state, or None if it was not followed."""
        state = self._states.pop(uri, None)
        if state is not None:
            state.cancel_timer()
        return state

    def forget_all(self) -> None:
        """Drop every document and its pending analysis (on the event loop's thread)."""
        for state in self._states.values():
            state.cancel_timer()
        self._states.clear()

    def debounce(self, uri: str, delay: float, analyze: Callable[[str], None]) -> None:
        """A change to `uri`: call `analyze(uri)` now after a quiet spell (or with no
        delay), else once, `delay` seconds after the last change of this burst."""
        state = self._states.get(uri)
        if state is None:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        quiet = now - state.last_change >= delay
        state.last_change = now
        state.cancel_timer()
        if delay == 0 or (quiet and not state.in_flight):
            analyze(uri)
        else:
            state.timer = loop.call_later(delay, analyze, uri)
