"""A progress bar on the terminal for long runs (rich, on stderr): kernels done, the last one, elapsed."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator


@contextmanager
def gate_progress() -> Iterator[Callable[[str, int, int], None]]:
    """`progress(name, done, total)` for `check --dynamic`; the bar goes when the block ends."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("gates"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.description}"), console=Console(stderr=True), transient=True)
    task = None

    def update(name: str, done: int, total: int) -> None:
        nonlocal task
        if task is None:
            task = bar.add_task("", total=total)
        bar.update(task, completed=done, description=name)

    with bar:
        yield update
