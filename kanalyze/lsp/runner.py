"""Analyses off the event loop: the worker process, driven from one thread, with
the results kept per text.

One thread drives the worker, so analyses run one at a time, in order, and
the server keeps answering while one runs.  A result is kept per (path, kind,
settings, text), so undo/redo costs nothing; an analysis whose document moved
on before its turn is skipped.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from kanalyze.lsp.analysis import unreadable
from kanalyze.lsp.worker import AnalysisWorker, WorkerFailed

TEXT_CACHE_SIZE = 32

# A small kernel analyzed once at start-up, so that the worker has imported
# LibCST and every rule before the first document arrives.
_WARM_UP = (
    "import triton\nimport triton.language as tl\n\n@triton.jit\n"
    "def k(x_ptr, BLOCK: tl.constexpr):\n"
    "    acc = tl.zeros((BLOCK,), dtype=tl.float16)\n"
    "    for i in range(4):\n        acc += tl.load(x_ptr + tl.arange(0, BLOCK))\n"
    "    tl.store(x_ptr + tl.arange(0, BLOCK), acc)\n"
)

Result = tuple[list[dict], int]  # finding dicts, and how many `# noqa` suppressed


class AnalysisRunner:
    def __init__(self) -> None:
        self.worker = AnalysisWorker()
        self.thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kanalyze-analysis")
        self._text_cache: OrderedDict[tuple, Result] = OrderedDict()

    async def analyze(self, still_wanted: Callable[[], bool], path: str, text: str, kind: str,
                      settings: dict | None = None) -> Result | None:
        """The findings for a text, in their turn on the analysis thread; None when
        `still_wanted()` says, at that turn, that the document moved on."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.thread, self._analyze_blocking, still_wanted, path, text, kind,
                                          settings)

    def _analyze_blocking(self, still_wanted: Callable[[], bool], path: str, text: str, kind: str,
                          settings: dict | None) -> Result | None:
        if not still_wanted():
            return None
        key = (path, kind, repr(sorted((settings or {}).items())),
               hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest())
        cached = self._text_cache.get(key)
        if cached is not None:
            self._text_cache.move_to_end(key)
            return cached
        try:
            result = self.worker.analyze(path, text, kind, settings)
        except WorkerFailed as exc:
            failure = unreadable(path, f"not analyzed: {exc}", code="KAN001", name="internal-error")
            return [failure.to_dict()], 0
        self._text_cache[key] = result
        if len(self._text_cache) > TEXT_CACHE_SIZE:
            self._text_cache.popitem(last=False)
        return result

    def warm_up(self) -> asyncio.Future:
        """Start the worker and its imports on the analysis thread, ahead of the first document."""
        return asyncio.get_running_loop().run_in_executor(self.thread, self._warm_up)

    def _warm_up(self) -> None:
        from kanalyze.rules import rules_by_code

        self.worker.start()  # the child imports the static pass while this process imports the rules,
        rules_by_code()      # which it needs to turn the first finding into a diagnostic
        try:
            self.worker.analyze("<warm-up>", _WARM_UP, "python")
        except WorkerFailed:
            pass  # the first real document will say what is wrong

    def close(self) -> None:
        """Stop the worker and the analysis thread; safe to call more than once."""
        self.worker.close()
        self.thread.shutdown(wait=False, cancel_futures=True)
