"""`kanalyze lsp`: the static findings as editor diagnostics, over stdio.

What happens to a document:
  - didOpen and didSave analyze it at once; didChange is debounced: a change
    after a quiet spell (no change for `debounce` ms) is analyzed at once, a
    burst of changes is analyzed once, `debounce` ms after its last change;
  - the analysis runs in a child process (worker.py) driven from one
    background thread, so the server keeps answering while it runs, and a
    crash or hang of the parser on some text becomes a diagnostic;
  - results are kept per document version (a save of an analyzed version,
    or a hover, costs nothing) and per text (undo/redo costs nothing);
  - a result for a version the user has already edited past is dropped: the
    next analysis is on its way.
Dynamic gates never run here; a finding shows `confirmed` only when the
dynamic pass left a witness for it under `.kanalyze/witnesses/`.

Settings, from the client (initializationOptions, workspace/didChangeConfiguration
or workspace/configuration, section "kanalyze"):
    select, ignore   codes or prefixes; replace [tool.kanalyze]'s, as on the command line
    ir               accepted; the IR pass is not part of this version
    debounce         milliseconds (default 150; 0 analyzes every change)
and from `[tool.kanalyze]` in the pyproject.toml above each file, as `kanalyze check`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import shutil
import sys
import tempfile
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from lsprotocol import types
from pygls.exceptions import FeatureRequestError, JsonRpcException, JsonRpcInvalidParams, JsonRpcParseError
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.uris import to_fs_path

from kanalyze import __version__
from kanalyze.analyzer.sources import discover
from kanalyze.config import Config, ConfigError, load_config
from kanalyze.findings import Finding
from kanalyze.lsp.analysis import CUDA, document_kind, unreadable
from kanalyze.lsp.convert import (
    SOURCE, WitnessIndex, contains, hover_markdown, overlaps, split_lines,
    suppression_edit, to_diagnostic,
)
from kanalyze.lsp.worker import AnalysisWorker, WorkerFailed
from kanalyze.rules import rules_by_code

log = logging.getLogger("kanalyze.lsp")

DEFAULT_DEBOUNCE_MS = 150
EXPLAIN_COMMAND = "kanalyze.explain"
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


# --- settings -------------------------------------------------------------------

@dataclass(frozen=True)
class Settings:
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] | None = None
    ir: bool = False
    debounce_ms: int = DEFAULT_DEBOUNCE_MS

    def merged(self, raw: Any) -> tuple["Settings", list[str]]:
        """These settings updated from a client's object; also the problems found in it.

        Accepts the settings themselves, or wrapped as {"kanalyze": {...}} (what
        editors send for a section) or {"settings": {...}} (as ruff's server).
        """
        if isinstance(raw, dict) and isinstance(raw.get("kanalyze"), dict):
            raw = raw["kanalyze"]
        elif isinstance(raw, dict) and isinstance(raw.get("settings"), dict):
            raw = raw["settings"]
        if raw is None:
            return self, []
        if not isinstance(raw, dict):
            return self, [f"settings must be an object, got {type(raw).__name__}"]
        values: dict[str, Any] = {}
        problems: list[str] = []
        for key in ("select", "ignore"):
            if key not in raw:
                continue
            if raw[key] is None:
                values[key] = None  # back to [tool.kanalyze]'s
            elif (codes := _codes(raw[key])) is not None:
                values[key] = codes
            else:
                problems.append(f"`{key}` must be a list of codes or a comma-separated string")
        if "ir" in raw:
            if isinstance(raw["ir"], bool):
                values["ir"] = raw["ir"]
            else:
                problems.append("`ir` must be true or false")
        if "debounce" in raw:
            value = raw["debounce"]
            if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 10_000:
                values["debounce_ms"] = value
            else:
                problems.append("`debounce` must be a number of milliseconds from 0 to 10000")
        unknown = sorted(set(raw) - {"select", "ignore", "ir", "debounce"})
        if unknown:
            problems.append(f"unknown setting(s): {', '.join(map(str, unknown))}")
        return replace(self, **values), problems


def _codes(value: Any) -> tuple[str, ...] | None:
    """Codes from a list or a comma-separated string; None if it is neither."""
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return tuple(v.strip().upper() for v in value if v.strip())


# --- per-document state ---------------------------------------------------------------

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


# --- protocol: answer malformed requests instead of dropping them ---------------------

@dataclass
class _BadRequest:
    id: Any
    error: JsonRpcException


class _Protocol(LanguageServerProtocol):
    """pygls logs a request whose params do not match the protocol and never
    answers it, which leaves a client waiting; answer with the error instead."""

    def structure_message(self, data: dict[str, Any]):
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if isinstance(data, dict) and "method" in data and data.get("id") is not None:
                return _BadRequest(data["id"], exc)
            raise

    def handle_message(self, message):
        if isinstance(message, _BadRequest):
            self._send_response(message.id, None, message.error.to_response_error())
            return
        super().handle_message(message)


# --- the server -----------------------------------------------------------------------

class KanalyzeServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(SOURCE, __version__, protocol_cls=_Protocol,
                         text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.settings = Settings()
        self.generation = 0                      # bumped whenever settings change
        self.docs: dict[str, DocState] = {}
        self.worker = AnalysisWorker()
        # One thread drives the worker: analyses run one at a time, in order.
        self.analysis_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kanalyze-analysis")
        self.witnesses = WitnessIndex()
        self._text_cache: OrderedDict[tuple, tuple[list[dict], int]] = OrderedDict()
        self._configs: dict[tuple, Config] = {}
        self._warned: set[str] = set()
        self._tasks: set[asyncio.Task] = set()
        self.docs_dir: str | None = None         # where "Explain" writes the pages it opens
        self.shutdown_requested = False

    # -- messages to the user --------------------------------------------------------

    def log(self, message: str, kind: types.MessageType = types.MessageType.Info) -> None:
        self.window_log_message(types.LogMessageParams(type=kind, message=f"kanalyze: {message}"))

    def warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            self.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning,
                                                             message=f"kanalyze: {message}"))
            self.log(message, types.MessageType.Warning)

    def report_server_error(self, error: Exception, source) -> None:
        # Errors the client is not waiting for (a malformed notification, a
        # failing handler): a line in the client's log, not a pop-up per keystroke.
        # A failed request was answered with its error already.
        if source is FeatureRequestError:
            return
        if source is JsonRpcException and isinstance(error, ValueError):
            # A frame that is not JSON (or not UTF-8) has no id to answer;
            # JSON-RPC says to answer it with a parse error and a null id.
            self.protocol._send_response(None, None, JsonRpcParseError(str(error)).to_response_error())
        try:
            self.log(f"{type(error).__name__}: {error}", types.MessageType.Error)
        except Exception:
            log.exception("cannot report an error to the client")

    # -- settings and configuration --------------------------------------------------

    def apply_settings(self, raw: Any) -> None:
        settings, problems = self.settings.merged(raw)
        for problem in problems:
            self.warn_once(f"ignoring a setting: {problem}")
        if settings != self.settings:
            self.settings = settings
            self.generation += 1
            self._configs.clear()
        if settings.ir:
            self.warn_once("`ir` is set, but the IR pass is not part of this version: "
                           "diagnostics come from the source pass only")

    def roots(self) -> list[str]:
        try:
            folders = [to_fs_path(f.uri) for f in self.workspace.folders.values()]
            root = self.workspace.root_path
        except RuntimeError:  # before initialize
            return []
        return [p for p in [*folders, root] if p]

    def config_for(self, state: DocState) -> tuple[Config, bool, tuple]:
        """The configuration for a document, whether its `exclude` leaves the document
        out (as `--force-exclude` does), and a stamp that changes whenever a
        pyproject.toml that could apply, or the client's settings, change."""
        roots = self.roots()
        start = state.path if state.is_file else (roots[0] if roots else os.getcwd())
        directory = os.path.dirname(start) if state.is_file else start
        stamp = (directory, _pyproject_stamp(directory), self.generation)
        config = self._configs.get(stamp)
        if config is None:
            options = {"select": self.settings.select, "ignore": self.settings.ignore}
            try:
                config = load_config([start], **options)
            except ConfigError as exc:
                self.warn_once(f"{exc}; using the defaults until it is fixed")
                config = load_config([start], isolated=True, **options)
            self._configs[stamp] = config
        excluded = state.is_file and not any(
            True for _ in discover([state.path], config.exclude, force_exclude=True, root=config.root))
        return config, excluded, stamp

    # -- analysis --------------------------------------------------------------------

    def document(self, uri: str):
        """The open document, or None (pygls keys them by the unquoted URI)."""
        return self.workspace.text_documents.get(unquote(uri))

    def _current_version(self, uri: str) -> int | None:
        document = self.document(uri)
        return document.version if document is not None else None

    def _analyze_blocking(self, uri: str, version: int | None, path: str, text: str, kind: str,
                          settings: dict | None = None):
        """Runs on the analysis thread.  None when the document moved on before its turn."""
        if uri not in self.docs or self._current_version(uri) != version:
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

    async def analyze_and_publish(self, uri: str) -> None:
        state = self.docs.get(uri)
        document = self.document(uri)
        if state is None or document is None:
            return
        version, text = document.version, document.source
        config, excluded, stamp = self.config_for(state)
        roots = list(dict.fromkeys(self.roots() + [config.root]))
        refs = tuple(ref for root in roots for ref in self.witnesses.refs(root))
        key = (version, stamp, refs)
        if state.published is not None and state.published.key == key:
            return  # this version was published with these settings and witnesses already
        if excluded:
            self._publish(state, Published(key, version, split_lines(text), [], []))
            return
        state.in_flight += 1
        try:
            loop = asyncio.get_running_loop()
            result = await loop.run_in_executor(
                self.analysis_thread, self._analyze_blocking, uri, version, state.path, text, state.kind,
                _proof_settings(config))
        finally:
            state.in_flight -= 1
        if result is None or self.docs.get(uri) is not state or self._current_version(uri) != version:
            return  # superseded: the analysis of the newer text is scheduled
        finding_dicts, _suppressed = result
        findings = [f for f in map(Finding.from_dict, finding_dicts)
                    if config.selects(f.code, state.path if state.is_file else None)]
        lines = split_lines(text)
        witnesses = [next((r for r in refs if state.is_file and r.matches(f, state.path)), None) for f in findings]
        units = self.workspace.position_codec.client_num_units
        diagnostics = [to_diagnostic(f, uri, lines, units, w) for f, w in zip(findings, witnesses)]
        self._publish(state, Published(key, version, lines, findings, diagnostics))

    def _publish(self, state: DocState, published: Published) -> None:
        state.published = published
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
            uri=state.uri, diagnostics=published.diagnostics, version=published.version))

    def schedule(self, uri: str) -> None:
        """Start an analysis now, in the background."""
        state = self.docs.get(uri)
        if state is not None:
            state.timer = None
        task = asyncio.ensure_future(self.analyze_and_publish(uri))
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            error = task.exception()
            self.report_server_error(error, type(error))

    def debounce(self, uri: str) -> None:
        state = self.docs.get(uri)
        if state is None:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        delay = self.settings.debounce_ms / 1000
        quiet = now - state.last_change >= delay
        state.last_change = now
        if state.timer is not None:
            state.timer.cancel()
            state.timer = None
        if delay == 0 or (quiet and not state.in_flight):
            self.schedule(uri)
        else:
            state.timer = loop.call_later(delay, self.schedule, uri)

    def republish_all(self) -> None:
        for uri in list(self.docs):
            self.schedule(uri)

    def open_state(self, uri: str, language_id: str | None) -> DocState | None:
        path = to_fs_path(uri) if uri.startswith("file:") else None
        kind = document_kind(path or uri, language_id)
        if kind is None:
            return None
        return DocState(uri=uri, path=path or uri, is_file=path is not None, kind=kind)

    def forget_documents(self) -> None:
        """Drop every document and its pending analysis (on the event loop's thread)."""
        for state in self.docs.values():
            if state.timer is not None:
                state.timer.cancel()
        self.docs.clear()

    def close(self) -> None:
        """Stop the worker and the analysis thread, remove the pages "Explain"
        wrote; safe to call more than once."""
        self.worker.close()
        self.analysis_thread.shutdown(wait=False, cancel_futures=True)
        if self.docs_dir is not None:
            shutil.rmtree(self.docs_dir, ignore_errors=True)
            self.docs_dir = None


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


# --- features -------------------------------------------------------------------------

def build_server() -> KanalyzeServer:
    server = KanalyzeServer()

    @server.feature(types.INITIALIZE)
    def initialize(ls: KanalyzeServer, params: types.InitializeParams) -> None:
        ls.apply_settings(params.initialization_options)

    @server.feature(types.INITIALIZED)
    async def initialized(ls: KanalyzeServer, params: types.InitializedParams) -> None:
        loop = asyncio.get_running_loop()
        warm = loop.run_in_executor(ls.analysis_thread, _warm_up, ls.worker)
        generation = ls.generation
        await _pull_configuration(ls)
        if ls.generation != generation:
            ls.republish_all()  # documents opened meanwhile were analyzed with the old settings
        await warm

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(ls: KanalyzeServer, params: types.DidChangeConfigurationParams) -> None:
        ls.apply_settings(params.settings)
        await _pull_configuration(ls)
        ls.republish_all()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: KanalyzeServer, params: types.DidOpenTextDocumentParams) -> None:
        item = params.text_document
        state = ls.open_state(item.uri, item.language_id)
        if state is None:
            return
        ls.docs[item.uri] = state
        ls.schedule(item.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: KanalyzeServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.debounce(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE, types.SaveOptions(include_text=False))
    def did_save(ls: KanalyzeServer, params: types.DidSaveTextDocumentParams) -> None:
        uri = params.text_document.uri
        state = ls.docs.get(uri)
        if state is not None:
            if state.timer is not None:
                state.timer.cancel()
            ls.schedule(uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: KanalyzeServer, params: types.DidCloseTextDocumentParams) -> None:
        state = ls.docs.pop(params.text_document.uri, None)
        if state is None:
            return
        if state.timer is not None:
            state.timer.cancel()
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=state.uri, diagnostics=[]))

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def hover(ls: KanalyzeServer, params: types.HoverParams) -> types.Hover | None:
        state = ls.docs.get(params.text_document.uri)
        if state is None or state.published is None:
            return None
        published = state.published
        hits = [(f, d) for f, d in zip(published.findings, published.diagnostics) if contains(d.range, params.position)]
        if not hits:
            return None
        text = hover_markdown([(f, d.data["status"]) for f, d in hits])
        return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text),
                           range=hits[0][1].range)

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION,
                    types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix]))
    def code_action(ls: KanalyzeServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        uri = params.text_document.uri
        state = ls.docs.get(uri)
        if state is None or state.published is None:
            return []
        published = state.published
        if published.version != ls._current_version(uri):
            return []  # the text moved on; the next diagnostics come with fresh actions
        only = params.context.only
        if only and not any(kind.startswith(types.CodeActionKind.QuickFix) for kind in only):
            return []
        actions: list[types.CodeAction] = []
        explained: set[str] = set()
        for finding, diagnostic in zip(published.findings, published.diagnostics):
            if not overlaps(diagnostic.range, params.range):
                continue
            edit = suppression_edit(published.lines, finding, state.kind)
            if edit is not None:
                marker = "// NOLINT" if state.kind == CUDA else "# noqa"
                actions.append(types.CodeAction(
                    title=f"Suppress {finding.code} on this line ({marker}: {finding.code})",
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[diagnostic],
                    edit=_workspace_edit(ls, uri, published, edit),
                ))
            if finding.code not in explained and finding.code in rules_by_code():
                explained.add(finding.code)
                actions.append(types.CodeAction(
                    title=f"Explain {finding.code} ({finding.name})",
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[diagnostic],
                    command=types.Command(title=f"Explain {finding.code}", command=EXPLAIN_COMMAND,
                                          arguments=[finding.code]),
                ))
        return actions

    @server.command(EXPLAIN_COMMAND)
    async def explain(ls: KanalyzeServer, *args: Any) -> str:
        if len(args) != 1 or not isinstance(args[0], str) or args[0].upper() not in rules_by_code():
            raise JsonRpcInvalidParams(f"{EXPLAIN_COMMAND} takes one clause code, e.g. [\"PRC002\"]")
        code = args[0].upper()
        markdown = rules_by_code()[code].explanation()
        await _show_explanation(ls, code, markdown)
        return markdown

    @server.feature(types.SHUTDOWN)
    async def shutdown(ls: KanalyzeServer, params: None) -> None:
        ls.shutdown_requested = True
        ls.forget_documents()
        await asyncio.get_running_loop().run_in_executor(None, ls.close)

    return server


def _warm_up(worker: AnalysisWorker) -> None:
    try:
        worker.analyze("<warm-up>", _WARM_UP, "python")
    except WorkerFailed:
        pass  # the first real document will say what is wrong


async def _pull_configuration(ls: KanalyzeServer) -> None:
    """Ask the client for the "kanalyze" section, where it offers that (VS Code, Neovim, Helix)."""
    capabilities = ls.client_capabilities
    if not (capabilities.workspace and capabilities.workspace.configuration):
        return
    try:
        result = await asyncio.wait_for(ls.workspace_configuration_async(types.ConfigurationParams(
            items=[types.ConfigurationItem(section="kanalyze")])), timeout=5)
    except Exception as exc:  # a client that cannot answer keeps the settings it pushed
        ls.log(f"workspace/configuration failed: {exc}", types.MessageType.Warning)
        return
    if result and result[0] is not None:
        ls.apply_settings(result[0])


def _workspace_edit(ls: KanalyzeServer, uri: str, published: Published, edit) -> types.WorkspaceEdit:
    units = ls.workspace.position_codec.client_num_units
    line = published.lines[edit.line]
    text_edit = types.TextEdit(
        range=types.Range(start=types.Position(line=edit.line, character=units(line[: edit.start])),
                          end=types.Position(line=edit.line, character=units(line[: edit.end]))),
        new_text=edit.text,
    )
    capabilities = ls.client_capabilities
    versioned = (capabilities.workspace and capabilities.workspace.workspace_edit
                 and capabilities.workspace.workspace_edit.document_changes)
    if versioned:
        # Tied to the analyzed version: a client refuses it once the text has changed.
        return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(
            text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=published.version),
            edits=[text_edit])])
    return types.WorkspaceEdit(changes={uri: [text_edit]})


async def _show_explanation(ls: KanalyzeServer, code: str, markdown: str) -> None:
    """Open the clause's docs in the editor: a markdown file where the client can
    show documents (it works offline), else a message."""
    capabilities = ls.client_capabilities
    can_show = capabilities.window and capabilities.window.show_document and capabilities.window.show_document.support
    path = None
    if can_show:
        try:
            if ls.docs_dir is None:
                ls.docs_dir = tempfile.mkdtemp(prefix="kanalyze-docs-")  # this server's own, whoever else runs one
            path = Path(ls.docs_dir) / f"{code}.md"
            path.write_text(markdown, encoding="utf-8")
        except OSError as exc:
            ls.log(f"cannot write the docs of {code}: {exc}", types.MessageType.Warning)
            path = None
    if path is None:
        ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Info, message=markdown))
        return
    try:
        await asyncio.wait_for(ls.window_show_document_async(
            types.ShowDocumentParams(uri=path.as_uri(), take_focus=True)), timeout=10)
    except Exception as exc:
        ls.log(f"window/showDocument failed: {exc}", types.MessageType.Warning)


def serve(stdin=None, stdout=None) -> int:
    """Run the server on stdio until the client says exit (or goes away).

    The exit status is the protocol's: 0 after a shutdown request, 1 without one.
    """
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="kanalyze-lsp %(levelname)s %(name)s: %(message)s")
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout.buffer
    # The protocol owns stdout: a stray print from anywhere must not corrupt it.
    sys.stdout = sys.stderr
    server = build_server()
    try:
        server.start_io(stdin, stdout)
    finally:
        server.close()
    return 0 if server.shutdown_requested else 1


def _proof_settings(config: Config) -> dict:
    """The z3 proof ranges of `[tool.kanalyze]`, and whether to run them at all
    (not when the selection leaves MEM003 and MEM004 out, as by default)."""
    from kanalyze.analyzer.bounds import proof_ranges

    settings = proof_ranges(config.raw)
    if not (config.selects("MEM003") or config.selects("MEM004")):
        settings["proofs"] = False
    return settings
