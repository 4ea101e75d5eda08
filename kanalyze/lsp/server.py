"""`kanalyze lsp`: the static findings as editor diagnostics, over stdio.

What happens to a document:
  - didOpen and didSave analyze it at once; didChange is debounced
    (documents.py);
  - the analysis runs in a child process (worker.py) driven from one
    background thread (runner.py), so the server keeps answering while it
    runs, and a crash or hang of the parser on some text becomes a diagnostic;
  - results are kept per document version (a save of an analyzed version,
    or a hover, costs nothing) and per text (undo/redo costs nothing), and
    the worker keeps each kernel's findings, so an edit re-analyzes only the
    kernels it touched (incremental.py);
  - a result for a version the user has already edited past is dropped: the
    next analysis is on its way.
Dynamic gates never run here; a finding shows `confirmed` only when the
dynamic pass left a witness for it under `.kanalyze/witnesses/`.

Settings come from the client (initializationOptions, workspace/didChangeConfiguration
or workspace/configuration, section "kanalyze"; settings.py says which) and from
`[tool.kanalyze]` in the pyproject.toml above each file, as `kanalyze check`
(configuration.py).  Hover, quick fixes and "Explain" are in actions.py.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import sys
from typing import Any
from urllib.parse import unquote

from lsprotocol import types
from pygls.exceptions import FeatureRequestError, JsonRpcException, JsonRpcInvalidParams, JsonRpcParseError
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from kanalyze import __version__
from kanalyze.config import Config
from kanalyze.findings import Finding
from kanalyze.lsp import actions
from kanalyze.lsp.actions import EXPLAIN_COMMAND
from kanalyze.lsp.configuration import Configurations, proof_settings
from kanalyze.lsp.convert import SOURCE, WitnessIndex, split_lines, to_diagnostic
from kanalyze.lsp.documents import DocState, Documents, Published
from kanalyze.lsp.protocol import KanalyzeProtocol
from kanalyze.lsp.runner import AnalysisRunner
from kanalyze.lsp.settings import Settings
from kanalyze.profile import apply_profile, profile_of
from kanalyze.rules import explanation, rules_by_code

__all__ = ["EXPLAIN_COMMAND", "KanalyzeServer", "Settings", "build_server", "serve"]

log = logging.getLogger("kanalyze.lsp")


class KanalyzeServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(SOURCE, __version__, protocol_cls=KanalyzeProtocol,
                         text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.settings = Settings()
        self.generation = 0                      # bumped whenever settings change
        self.docs = Documents()
        self.runner = AnalysisRunner()
        self.witnesses = WitnessIndex()
        self.configurations = Configurations()
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
            self.configurations.clear()
        if settings.ir:
            self.warn_once("`ir` is set, but the editor runs the source pass only (compiling kernels on "
                           "every edit is too slow): run `kanalyze check --ir` for the compiled code")

    def roots(self) -> list[str]:
        try:
            folders = [to_fs_path(f.uri) for f in self.workspace.folders.values()]
            root = self.workspace.root_path
        except RuntimeError:  # before initialize
            return []
        return [p for p in [*folders, root] if p]

    def config_for(self, state: DocState) -> tuple[Config, bool, tuple]:
        """The configuration for a document, whether it is excluded, and its stamp (configuration.py)."""
        return self.configurations.for_document(state, self.roots(), self.settings, self.generation,
                                                self.warn_once)

    # -- analysis --------------------------------------------------------------------

    def document(self, uri: str):
        """The open document, or None (pygls keys them by the unquoted URI)."""
        return self.workspace.text_documents.get(unquote(uri))

    def current_version(self, uri: str) -> int | None:
        document = self.document(uri)
        return document.version if document is not None else None

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

        def still_wanted() -> bool:  # asked on the analysis thread, when this analysis's turn comes
            return uri in self.docs and self.current_version(uri) == version

        state.in_flight += 1
        try:
            result = await self.runner.analyze(still_wanted, state.path, text, state.kind, proof_settings(config))
        finally:
            state.in_flight -= 1
        if result is None or self.docs.get(uri) is not state or self.current_version(uri) != version:
            return  # superseded: the analysis of the newer text is scheduled
        finding_dicts, _suppressed = result
        findings = apply_profile([f for f in map(Finding.from_dict, finding_dicts)
                                  if config.selects(f.code, state.path if state.is_file else None)],
                                 config, profile_of(config, text))
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
        self.docs.debounce(uri, self.settings.debounce_ms / 1000, self.schedule)

    def republish_all(self) -> None:
        for uri in self.docs:
            self.schedule(uri)

    def close(self) -> None:
        """Stop the worker and the analysis thread, remove the pages "Explain"
        wrote; safe to call more than once."""
        self.runner.close()
        if self.docs_dir is not None:
            shutil.rmtree(self.docs_dir, ignore_errors=True)
            self.docs_dir = None


# --- features -------------------------------------------------------------------------

def build_server() -> KanalyzeServer:
    server = KanalyzeServer()

    @server.feature(types.INITIALIZE)
    def initialize(ls: KanalyzeServer, params: types.InitializeParams) -> None:
        ls.apply_settings(params.initialization_options)

    @server.feature(types.INITIALIZED)
    async def initialized(ls: KanalyzeServer, params: types.InitializedParams) -> None:
        warm = ls.runner.warm_up()
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
        if ls.docs.open(item.uri, item.language_id) is not None:
            ls.schedule(item.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: KanalyzeServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.debounce(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE, types.SaveOptions(include_text=False))
    def did_save(ls: KanalyzeServer, params: types.DidSaveTextDocumentParams) -> None:
        uri = params.text_document.uri
        state = ls.docs.get(uri)
        if state is not None:
            state.cancel_timer()
            ls.schedule(uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: KanalyzeServer, params: types.DidCloseTextDocumentParams) -> None:
        state = ls.docs.close(params.text_document.uri)
        if state is not None:
            ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=state.uri, diagnostics=[]))

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def hover(ls: KanalyzeServer, params: types.HoverParams) -> types.Hover | None:
        state = ls.docs.get(params.text_document.uri)
        if state is None or state.published is None:
            return None
        return actions.hover(state.published, params.position)

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION,
                    types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix]))
    def code_action(ls: KanalyzeServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        uri = params.text_document.uri
        state = ls.docs.get(uri)
        if state is None or state.published is None:
            return []
        if state.published.version != ls.current_version(uri):
            return []  # the text moved on; the next diagnostics come with fresh actions
        only = params.context.only
        if only and not any(kind.startswith(types.CodeActionKind.QuickFix) for kind in only):
            return []
        return actions.code_actions(ls, state, state.published, params.range, only)

    @server.command(EXPLAIN_COMMAND)
    async def explain(ls: KanalyzeServer, *args: Any) -> str:
        if len(args) != 1 or not isinstance(args[0], str) or args[0].upper() not in rules_by_code():
            raise JsonRpcInvalidParams(f"{EXPLAIN_COMMAND} takes one clause code, e.g. [\"PRC002\"]")
        code = args[0].upper()
        markdown = explanation(rules_by_code()[code])
        await actions.show_explanation(ls, code, markdown)
        return markdown

    @server.feature(types.SHUTDOWN)
    async def shutdown(ls: KanalyzeServer, params: None) -> None:
        ls.shutdown_requested = True
        ls.docs.forget_all()
        await asyncio.get_running_loop().run_in_executor(None, ls.close)

    return server


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
