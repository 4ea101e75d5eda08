"""Progress bars on the terminal for long runs (rich, on stderr): items done of all, the last
one, elapsed.  Transient: a bar goes when its block ends, so the report after it is the same
with a bar or without.  The caller decides whether there is a terminal to draw on."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable, Iterator

# Without a ticking thread, the bar is redrawn at most this often (a warm run tells it of
# thousands of cached files in a blink; drawing each would cost more than the run).
REDRAW_EVERY_S = 0.1


@contextmanager
def progress_bar(label: str, *, ticking: bool = True) -> Iterator[Callable[[str, int, int], None]]:
    """`update(name, done, total)` for a bar labelled `label`; nothing is drawn before the
    first update.  `ticking`: a thread of rich's redraws the bar a few times a second, so the
    elapsed time runs while an item takes long.  Off where the work forks processes (the
    static pass's pool): a forked child would inherit the thread's locks, held or not; the
    bar is then redrawn by `update` itself."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.description}"), console=Console(stderr=True), transient=True,
                   auto_refresh=ticking)
    task = None
    drawn = 0.0

    def update(name: str, done: int, total: int) -> None:
        nonlocal task, drawn
        if task is None:
            task = bar.add_task("", total=total)
        now = time.monotonic()
        redraw = not ticking and (done >= total or now - drawn >= REDRAW_EVERY_S)
        bar.update(task, completed=done, total=total, description=name, refresh=redraw)
        if redraw:
            drawn = now

    with bar:
        yield update

