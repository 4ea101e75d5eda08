"""`[tool.kanalyze]` for an open document: the pyproject.toml above its file,
with the client's select/ignore over it, as `kanalyze check` would read it.

Configurations are cached by a stamp: the directory, the modification time of
every pyproject.toml from there up, and the settings' generation, so an edit
to a pyproject.toml or a settings change takes effect on the next analysis.
"""

from __future__ import annotations

import os
from typing import Callable

from kanalyze.analyzer.sources import discover
from kanalyze.config import Config, ConfigError, load_config
from kanalyze.lsp.documents import DocState
from kanalyze.lsp.settings import Settings


class Configurations:
    """The configuration of each directory with open documents, loaded once per stamp."""

    def __init__(self) -> None:
        self._configs: dict[tuple, Config] = {}

    def clear(self) -> None:
        self._configs.clear()

    def for_document(self, state: DocState, roots: list[str], settings: Settings, generation: int,
                     warn: Callable[[str], None]) -> tuple[Config, bool, tuple]:
        """The configuration for a document, whether its `exclude` leaves the document
        out (as `--force-exclude` does), and a stamp that changes whenever a
        pyproject.toml that could apply, or the client's settings, change."""
        start = state.path if state.is_file else (roots[0] if roots else os.getcwd())
        directory = os.path.dirname(start) if state.is_file else start
        stamp = (directory, _pyproject_stamp(directory), generation)
        config = self._configs.get(stamp)
        if config is None:
            options = {"select": settings.select, "ignore": settings.ignore}
            try:
                config = load_config([start], **options)
            except ConfigError as exc:
                warn(f"{exc}; using the defaults until it is fixed")
                config = load_config([start], isolated=True, **options)
            self._configs[stamp] = config
        excluded = state.is_file and not any(
            True for _ in discover([state.path], config.exclude, force_exclude=True, root=config.root))
        return config, excluded, stamp


def _pyproject_stamp(directory: str) -> tuple:
    """(path, mtime) of every pyproject.toml from `directory` up: what load_config may read."""
    stamp = []
    current = os.path.abspath(directory)
    while True:
        candidate = os.path.join(current, "pyproject.toml")
        try:
            stamp.append((candidate, os.stat(candidate).st_mtime_ns))
        except OSError:
            pass
        parent = os.path.dirname(current)
        if parent == current:
            return tuple(stamp)
        current = parent


def proof_settings(config: Config) -> dict:
    """The z3 proof ranges of `[tool.kanalyze]`, and whether to run them at all
    (not when the selection leaves MEM003 and MEM004 out, as by default)."""
    from kanalyze.analyzer.bounds.proofs import proof_ranges

    settings = proof_ranges(config.raw)
    if not (config.selects("MEM003") or config.selects("MEM004")):
        settings["proofs"] = False
    return settings
