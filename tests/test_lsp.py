"""`kanalyze lsp` driven the way an editor drives it: a real server process over stdio.

The main scenarios use pygls's own LanguageClient; the malformed-input
scenario speaks raw JSON-RPC frames, since a typed client cannot send
malformed messages.  No assertion here is about time.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import shlex
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any, Union

import pytest
from lsprotocol import types
from pygls.lsp.client import LanguageClient
from pygls.protocol import default_converter
from pygls.uris import to_fs_path

from kanalyze.rules import explanation, rules_by_code
from kernels import TF32_KERNEL

FIXED_KERNEL = TF32_KERNEL.replace("tl.dot(a, b)", 'tl.dot(a, b, input_precision="ieee")')
# `tl.dot(a, b)` on line 10, column 9 (1-based) → LSP line 9, characters 8..20.
DOT_LINE, DOT_START, DOT_END = 9, 8, 8 + len("tl.dot(a, b)")
WAIT = 60  # seconds; generous, for a loaded CI machine: nothing here measures time

PRC001 = rules_by_code()["PRC001"]


def server_command(log: Path) -> tuple[str, ...]:
    """The server as an editor starts it, its stderr kept in a file (nobody reads the pipe)."""
    command = f"exec {shlex.quote(sys.executable)} -m kanalyze lsp 2>>{shlex.quote(str(log))}"
    return ("/bin/sh", "-c", command)


def _converter():
    """pygls's converter, telling a Command from a CodeAction as editors do.

    lsprotocol 2025.0.0 reads every code action that has a `command` member as a
    bare Command, so a CodeAction that carries a command (as "Explain" does)
    loses its title and kind.  The protocol tells them apart by the type of
    `command`: a string in a Command, an object in a CodeAction.
    """
    converter = default_converter()

    def command_or_action(obj: Any, _type: Any) -> types.Command | types.CodeAction:
        if isinstance(obj.get("command"), str):
            return converter.structure(obj, types.Command)
        return converter.structure(obj, types.CodeAction)

    converter.register_structure_hook(Union[types.Command, types.CodeAction], command_or_action)
    return converter


class Editor:
    """A pygls client plus what an editor remembers: published diagnostics, shown documents."""

    def __init__(self, root: Path, configuration: Any = None) -> None:
        self.root = root
        self.log = root.parent / f"{root.name}-server.log"
        self.client = LanguageClient("kanalyze-tests", "1", converter_factory=_converter)
        self.published: dict[str, list[types.PublishDiagnosticsParams]] = {}
        self.shown: list[str] = []
        self.configuration_requests = 0
        self._arrived = asyncio.Event()

        @self.client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def publish(ls, params: types.PublishDiagnosticsParams) -> None:
            self.published.setdefault(params.uri, []).append(params)
            self._arrived.set()

        @self.client.feature(types.WINDOW_SHOW_DOCUMENT)
        def show_document(ls, params: types.ShowDocumentParams) -> types.ShowDocumentResult:
            self.shown.append(params.uri)
            return types.ShowDocumentResult(success=True)

        if configuration is not None:
            @self.client.feature(types.WORKSPACE_CONFIGURATION)
            def workspace_configuration(ls, params: types.ConfigurationParams) -> list[Any]:
                self.configuration_requests += 1
                return [configuration for _ in params.items]

    async def start(self, initialization_options: Any = None, pull_configuration: bool = False) -> types.InitializeResult:
        await self.client.start_io(*server_command(self.log), cwd=str(self.root))
        capabilities = types.ClientCapabilities(
            workspace=types.WorkspaceClientCapabilities(
                workspace_edit=types.WorkspaceEditClientCapabilities(document_changes=True),
                configuration=pull_configuration,
            ),
            window=types.WindowClientCapabilities(show_document=types.ShowDocumentClientCapabilities(support=True)),
            text_document=types.TextDocumentClientCapabilities(
                publish_diagnostics=types.PublishDiagnosticsClientCapabilities(
                    related_information=True, version_support=True, code_description_support=True)),
        )
        result = await asyncio.wait_for(self.client.initialize_async(types.InitializeParams(
            capabilities=capabilities, root_uri=self.root.as_uri(), process_id=os.getpid(),
            workspace_folders=[types.WorkspaceFolder(uri=self.root.as_uri(), name=self.root.name)],
            initialization_options=initialization_options)), WAIT)
        self.client.initialized(types.InitializedParams())
        return result

    def open(self, uri: str, text: str, version: int = 1, language: str = "python") -> None:
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri=uri, language_id=language, version=version, text=text)))

    def change(self, uri: str, version: int, text: str) -> None:
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))

    async def diagnostics(self, uri: str, version: int | None) -> list[types.Diagnostic]:
        """The diagnostics published for `version` of the document (waits for them)."""
        async def arrived() -> list[types.Diagnostic]:
            while True:
                for params in self.published.get(uri, []):
                    if params.version == version:
                        return list(params.diagnostics)
                self._arrived.clear()
                await self._arrived.wait()
        try:
            return await asyncio.wait_for(arrived(), WAIT)
        except asyncio.TimeoutError:
            raise AssertionError(f"no diagnostics for {uri} version {version}; "
                                 f"published: {self.published.get(uri)}; server log:\n{self.server_log()}")

    async def latest(self, uri: str, predicate) -> types.PublishDiagnosticsParams:
        """Wait until the last publish for `uri` satisfies `predicate`."""
        async def settled() -> types.PublishDiagnosticsParams:
            while True:
                history = self.published.get(uri, [])
                if history and predicate(history[-1]):
                    return history[-1]
                self._arrived.clear()
                await self._arrived.wait()
        try:
            return await asyncio.wait_for(settled(), WAIT)
        except asyncio.TimeoutError:
            raise AssertionError(f"published for {uri}: {self.published.get(uri)}; server log:\n{self.server_log()}")

    def server_log(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    async def stop(self) -> int | None:
        await asyncio.wait_for(self.client.shutdown_async(None), WAIT)
        self.client.exit(None)
        await asyncio.wait_for(self.client.stop(), WAIT)
        return self.client._server.returncode if self.client._server else None


def run(scenario) -> None:
    asyncio.run(scenario())


def apply_edits(text: str, edits: list[types.TextEdit]) -> str:
    """Apply single-line TextEdits to ASCII text (what these tests' edits are)."""
    lines = text.split("\n")
    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        assert edit.range.start.line == edit.range.end.line
        line = lines[edit.range.start.line]
        lines[edit.range.start.line] = line[: edit.range.start.character] + edit.new_text + line[edit.range.end.character:]
    return "\n".join(lines)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "pyproject.toml").write_text("[tool.kanalyze]\n")
    (root / "kern.py").write_text(TF32_KERNEL)
    return root


def test_defect_fix_and_noqa_round_trip(workspace: Path) -> None:
    """Open a defect, see it; fix it, see it go; bring it back, suppress it through the code action."""
    uri = (workspace / "kern.py").as_uri()

    async def scenario() -> None:
        editor = Editor(workspace)
        result = await editor.start()
        capabilities = result.capabilities
        assert capabilities.hover_provider
        assert "kanalyze.explain" in capabilities.execute_command_provider.commands
        assert result.server_info.name == "kanalyze"

        editor.open(uri, TF32_KERNEL, version=1)
        [diagnostic] = await editor.diagnostics(uri, 1)
        assert diagnostic.code == "PRC001"
        assert diagnostic.source == "kanalyze"
        assert diagnostic.severity == types.DiagnosticSeverity.Error
        assert (diagnostic.range.start.line, diagnostic.range.start.character) == (DOT_LINE, DOT_START)
        assert (diagnostic.range.end.line, diagnostic.range.end.character) == (DOT_LINE, DOT_END)
        assert diagnostic.code_description.href == PRC001.help_uri()
        assert "input_precision" in diagnostic.message
        assert diagnostic.data["status"] == "flagged"
        assert diagnostic.data["gate"] == PRC001.gate
        assert any(PRC001.gate in info.message for info in diagnostic.related_information)
        assert any(info.message.startswith("evidence: ") for info in diagnostic.related_information)

        # Hover on the flagged range shows the clause's docs; elsewhere, nothing.
        hover = await editor.client.text_document_hover_async(types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=DOT_LINE, character=DOT_START + 3)))
        assert hover is not None and explanation(PRC001).strip() in hover.contents.value
        assert hover.contents.kind == types.MarkupKind.Markdown
        nothing = await editor.client.text_document_hover_async(types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=0, character=2)))
        assert nothing is None

        # The fix as an editor sends it: an incremental change of the flagged range only.
        editor.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangePartial(
                range=diagnostic.range, text='tl.dot(a, b, input_precision="ieee")')]))
        assert await editor.diagnostics(uri, 2) == []

        editor.change(uri, 3, TF32_KERNEL)
        [diagnostic] = await editor.diagnostics(uri, 3)
        actions = await editor.client.text_document_code_action_async(types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), range=diagnostic.range,
            context=types.CodeActionContext(diagnostics=[diagnostic])))
        titles = [action.title for action in actions]
        assert all(isinstance(a, types.CodeAction) for a in actions), actions
        noqa = next(a for a in actions if "noqa" in a.title)
        explain = next(a for a in actions if a.command is not None)
        assert explain.title == "Explain PRC001 (precision-downgrade)"
        assert noqa.kind == types.CodeActionKind.QuickFix and noqa.diagnostics[0].code == "PRC001", titles
        [document_edit] = noqa.edit.document_changes
        assert document_edit.text_document.uri == uri and document_edit.text_document.version == 3
        suppressed = apply_edits(TF32_KERNEL, document_edit.edits)
        assert suppressed.splitlines()[DOT_LINE] == "    c = tl.dot(a, b)  # noqa: PRC001"

        editor.change(uri, 4, suppressed)
        assert await editor.diagnostics(uri, 4) == []

        # "Explain" opens the same text `kanalyze explain PRC001` prints.
        assert explain.command.command == "kanalyze.explain" and list(explain.command.arguments) == ["PRC001"]
        text = await editor.client.workspace_execute_command_async(types.ExecuteCommandParams(
            command=explain.command.command, arguments=explain.command.arguments))
        assert text == explanation(PRC001)
        assert editor.shown and editor.shown[-1].startswith("file://")
        assert Path(to_fs_path(editor.shown[-1])).read_text(encoding="utf-8") == text

        editor.client.text_document_did_close(types.DidCloseTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=uri)))
        assert await editor.diagnostics(uri, None) == []
        assert await editor.stop() == 0

    run(scenario)


def test_columns_are_utf16_code_units(workspace: Path) -> None:
    """LSP counts columns in UTF-16 by default: a character outside the BMP counts twice."""
    prefix = '    e = "\U0001F600\U0001F600"; c = '
    text = TF32_KERNEL.replace("    c = tl.dot(a, b)", prefix + "tl.dot(a, b)")
    uri = (workspace / "kern.py").as_uri()
    utf16 = len(prefix.encode("utf-16-le")) // 2
    assert utf16 == len(prefix) + 2

    async def scenario() -> None:
        editor = Editor(workspace)
        await editor.start()
        editor.open(uri, text)
        [diagnostic] = await editor.diagnostics(uri, 1)
        assert (diagnostic.range.start.line, diagnostic.range.start.character) == (DOT_LINE, utf16)
        assert diagnostic.range.end.character == utf16 + len("tl.dot(a, b)")
        actions = await editor.client.text_document_code_action_async(types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), range=diagnostic.range,
            context=types.CodeActionContext(diagnostics=[diagnostic])))
        [edit] = next(a for a in actions if a.edit is not None).edit.document_changes[0].edits
        line = text.splitlines()[DOT_LINE]
        assert edit.range.start.character == len(line.encode("utf-16-le")) // 2
        await editor.stop()

    run(scenario)


def test_noqa_extends_an_existing_code_list(workspace: Path) -> None:
    text = TF32_KERNEL.replace("c = tl.dot(a, b)", "c = tl.dot(a, b)  # noqa: EXC001")
    uri = (workspace / "kern.py").as_uri()

    async def scenario() -> None:
        editor = Editor(workspace)
        await editor.start()
        editor.open(uri, text)
        [diagnostic] = await editor.diagnostics(uri, 1)
        actions = await editor.client.text_document_code_action_async(types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), range=diagnostic.range,
            context=types.CodeActionContext(diagnostics=[diagnostic])))
        noqa = next(a for a in actions if a.edit is not None)
        edited = apply_edits(text, noqa.edit.document_changes[0].edits)
        assert edited.splitlines()[DOT_LINE] == "    c = tl.dot(a, b)  # noqa: EXC001, PRC001"
        editor.change(uri, 2, edited)
        assert await editor.diagnostics(uri, 2) == []
        await editor.stop()

    run(scenario)


def test_settings_from_pyproject_and_client(workspace: Path) -> None:
    """[tool.kanalyze] applies; the client's `select` replaces its selection, as on the command line."""
    (workspace / "pyproject.toml").write_text('[tool.kanalyze]\nignore = ["PRC001"]\nexclude = ["vendor"]\n')
    (workspace / "vendor").mkdir()
    uri = (workspace / "kern.py").as_uri()
    vendored = (workspace / "vendor" / "kern.py").as_uri()

    async def scenario() -> None:
        editor = Editor(workspace)
        await editor.start(initialization_options={"debounce": 50})
        editor.open(uri, TF32_KERNEL)
        assert await editor.diagnostics(uri, 1) == []
        editor.open(vendored, TF32_KERNEL)
        assert await editor.diagnostics(vendored, 1) == []

        editor.client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
            settings={"kanalyze": {"select": ["PRC001"]}}))
        editor.change(uri, 2, TF32_KERNEL + "\n")
        assert [d.code for d in await editor.diagnostics(uri, 2)] == ["PRC001"]
        # `exclude` still applies to a vendored file, as `kanalyze check --force-exclude`.
        editor.change(vendored, 2, TF32_KERNEL + "\n")
        assert await editor.diagnostics(vendored, 2) == []

        editor.client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
            settings={"kanalyze": {"select": ["PRC"], "ignore": ["PRC001"]}}))
        editor.change(uri, 3, TF32_KERNEL)
        assert await editor.diagnostics(uri, 3) == []
        await editor.stop()

    run(scenario)


def test_an_edited_pyproject_applies_at_the_next_analysis(workspace: Path) -> None:
    uri = (workspace / "kern.py").as_uri()

    async def scenario() -> None:
        editor = Editor(workspace)
        await editor.start()
        editor.open(uri, TF32_KERNEL)
        assert [d.code for d in await editor.diagnostics(uri, 1)] == ["PRC001"]
        (workspace / "pyproject.toml").write_text('[tool.kanalyze]\nignore = ["PRC001"]\n')
        editor.change(uri, 2, TF32_KERNEL + "\n")
        assert await editor.diagnostics(uri, 2) == []
        await editor.stop()

    run(scenario)


def test_settings_pulled_with_workspace_configuration(workspace: Path) -> None:
    """A client that serves workspace/configuration (VS Code, Neovim, Helix) is asked for "kanalyze"."""
    uri = (workspace / "kern.py").as_uri()

    async def scenario() -> None:
        editor = Editor(workspace, configuration={"ignore": "PRC001"})
        await editor.start(pull_configuration=True)
        editor.open(uri, TF32_KERNEL)
        # The document may first be analyzed with the defaults; once the pulled
        # settings arrive it is analyzed again, and its diagnostics settle empty.
        settled = await editor.latest(uri, lambda params: params.version == 1 and not params.diagnostics)
        assert list(settled.diagnostics) == []
        assert editor.configuration_requests >= 1
        await editor.stop()

    run(scenario)


def test_witness_in_the_workspace_confirms(workspace: Path) -> None:
    witnesses = workspace / ".kanalyze" / "witnesses"
    witnesses.mkdir(parents=True)
    witness = witnesses / "prc001-matmul.json"
    witness.write_text(json.dumps({
        "clause": "PRC001", "gate": PRC001.gate, "kernel": {"file": "kern.py", "function": "matmul"},
        "seed": 0, "metric": {"max_rel_error": 1.2e-3},
    }))
    # Another clause's witness and another kernel's witness confirm nothing here.
    (witnesses / "prc002.json").write_text(json.dumps({"clause": "PRC002", "kernel": {"file": "kern.py"}}))
    (witnesses / "other.json").write_text(json.dumps({"clause": "PRC001", "kernel": "other.py::matmul"}))
    (witnesses / "broken.json").write_text("{ not json")
    uri = (workspace / "kern.py").as_uri()
    other = (workspace / "other_kern.py").as_uri()

    async def scenario() -> None:
        editor = Editor(workspace)
        await editor.start()
        editor.open(uri, TF32_KERNEL)
        [diagnostic] = await editor.diagnostics(uri, 1)
        assert diagnostic.data["status"] == "confirmed"
        assert "confirmed" in diagnostic.message
        assert diagnostic.data["witness"] == str(witness)
        assert any(info.location.uri == witness.as_uri() for info in diagnostic.related_information)

        editor.open(other, TF32_KERNEL)
        [unconfirmed] = await editor.diagnostics(other, 1)
        assert unconfirmed.data["status"] == "flagged" and "confirmed" not in unconfirmed.message

        # The dynamic pass confirms it later; the next save shows that (no edit needed).
        (witnesses / "prc001-other.json").write_text(json.dumps(
            {"clause": "PRC001", "gate": PRC001.gate, "kernel": "other_kern.py::matmul"}))
        editor.client.text_document_did_save(types.DidSaveTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=other)))
        confirmed = await editor.latest(other, lambda p: p.diagnostics and p.diagnostics[0].data["status"] == "confirmed")
        assert "(confirmed: witness .kanalyze/witnesses/prc001-other.json)" in confirmed.diagnostics[0].message
        await editor.stop()

    run(scenario)


def test_bursts_of_changes_are_debounced(workspace: Path) -> None:
    """Five changes at once: only the last version's diagnostics (or the first's,
    analyzed before the burst went on) are published, never those in between."""
    uri = (workspace / "kern.py").as_uri()
    texts = {1: FIXED_KERNEL, 2: TF32_KERNEL, 3: FIXED_KERNEL, 4: TF32_KERNEL, 5: FIXED_KERNEL, 6: TF32_KERNEL}

    async def scenario() -> None:
        editor = Editor(workspace)
        await editor.start(initialization_options={"debounce": 1000})
        editor.open(uri, texts[1])
        assert await editor.diagnostics(uri, 1) == []
        await asyncio.sleep(1.1)  # quiet: the next change is the first of a burst
        for version in range(2, 7):
            editor.change(uri, version, texts[version])
        assert [d.code for d in await editor.diagnostics(uri, 6)] == ["PRC001"]
        published = [p.version for p in editor.published[uri]]
        assert set(published) <= {1, 2, 6}, published
        await editor.stop()

    run(scenario)


def test_an_edit_in_one_kernel_of_many_is_placed_where_check_places_it(workspace: Path) -> None:
    """The worker re-analyzes only the kernel an edit touched (kanalyze/lsp/incremental.py);
    the diagnostics are those of the whole text, rows and all, as the rows above move."""
    header, kernel = FIXED_KERNEL.split("@triton.jit")
    many = header + "".join(f"@triton.jit{kernel.replace('def matmul', f'def matmul_{i}')}\n\n" for i in range(4))
    third = many.index("def matmul_2")
    tf32 = many[:third] + many[third:].replace('tl.dot(a, b, input_precision="ieee")', "tl.dot(a, b)", 1)
    moved = "# a comment\n\n\n" + tf32
    uri = (workspace / "many.py").as_uri()

    def dot_line(text: str) -> int:  # 0-based, as LSP counts
        return text[:text.index("tl.dot(a, b)")].count("\n")

    async def scenario() -> None:
        editor = Editor(workspace)
        await editor.start(initialization_options={"debounce": 0})
        editor.open(uri, many)
        assert await editor.diagnostics(uri, 1) == []
        for version, text in ((2, tf32), (3, moved), (4, many)):
            editor.change(uri, version, text)
            found = [(d.code, d.range.start.line) for d in await editor.diagnostics(uri, version)]
            assert found == ([("PRC001", dot_line(text))] if text is not many else [])
        await editor.stop()

    run(scenario)


def test_documents_of_every_kind_and_place(workspace: Path, tmp_path: Path) -> None:
    """CUDA files are accepted; a file outside the workspace and an unsaved buffer are analyzed;
    text that does not parse, or that crashes the parser, becomes a diagnostic and the server goes on."""
    outside = tmp_path / "elsewhere" / "kern.py"
    outside.parent.mkdir()
    cuda_uri = (workspace / "kern.cu").as_uri()
    broken_uri = (workspace / "broken.py").as_uri()
    nested_uri = (workspace / "nested.py").as_uri()
    not_python = (workspace / "notes.txt").as_uri()
    cuda = "__global__ void add(float *x, int n) { int i = threadIdx.x; if (i < n) x[i] += 1.0f; }\n"
    does_not_parse = "import triton\n\n@triton.jit\ndef kernel(x_ptr\n"
    # Thousands of nested parentheses would crash LibCST's native parser (a signal, not an
    # exception); the pipeline refuses such text before parsing, as CPython does.
    crashes_parser = "import triton\n\n@triton.jit\ndef k():\n    x = " + "(" * 20000 + "1" + ")" * 20000 + "\n"

    async def scenario() -> None:
        editor = Editor(workspace)
        await editor.start()
        editor.open(cuda_uri, cuda, language="cuda-cpp")
        assert await editor.diagnostics(cuda_uri, 1) == []

        editor.open(outside.as_uri(), TF32_KERNEL)
        assert [d.code for d in await editor.diagnostics(outside.as_uri(), 1)] == ["PRC001"]
        editor.open("untitled:Untitled-1", TF32_KERNEL)
        assert [d.code for d in await editor.diagnostics("untitled:Untitled-1", 1)] == ["PRC001"]

        editor.open(broken_uri, does_not_parse)
        [parse_error] = await editor.diagnostics(broken_uri, 1)
        assert parse_error.code == "KAN000" and "cannot parse" in parse_error.message
        assert parse_error.range.start.line == 3  # row 4, `def kernel(x_ptr`, as `kanalyze check` reports it

        editor.open(nested_uri, crashes_parser)
        [refused] = await editor.diagnostics(nested_uri, 1)
        assert refused.code == "KAN000" and "brackets are open at once" in refused.message

        # Still serving, with a fresh worker: the same defect as before is found.
        editor.change(broken_uri, 2, TF32_KERNEL)
        assert [d.code for d in await editor.diagnostics(broken_uri, 2)] == ["PRC001"]

        editor.open(not_python, "tl.dot(a, b) in prose\n", language="plaintext")
        hover = await editor.client.text_document_hover_async(types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=not_python), position=types.Position(line=0, character=1)))
        assert hover is None and not_python not in editor.published
        await editor.stop()

    run(scenario)


def test_huge_document_is_reported_not_analyzed(workspace: Path) -> None:
    from kanalyze.analyzer.sources import MAX_FILE_BYTES

    uri = (workspace / "huge.py").as_uri()
    huge = TF32_KERNEL + "# padding\n" * (MAX_FILE_BYTES // 10 + 1)

    async def scenario() -> None:
        editor = Editor(workspace)
        await editor.start()
        editor.open(uri, huge)
        [diagnostic] = await editor.diagnostics(uri, 1)
        assert diagnostic.code == "KAN000" and "too large" in diagnostic.message
        editor.change(uri, 2, TF32_KERNEL)
        assert [d.code for d in await editor.diagnostics(uri, 2)] == ["PRC001"]
        await editor.stop()

    run(scenario)


# --- malformed messages: a raw JSON-RPC client ------------------------------------------


class RawClient:
    """Frames JSON-RPC messages by hand, so that it can send what no typed client would."""

    def __init__(self, root: Path) -> None:
        self.log = open(root.parent / "raw-server.log", "wb")
        self.process = subprocess.Popen([sys.executable, "-m", "kanalyze", "lsp"], cwd=root,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log)
        self.messages: queue.Queue[dict] = queue.Queue()
        self.notifications: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        stream = self.process.stdout
        while True:
            length = None
            while True:
                line = stream.readline()
                if not line:
                    return
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
                if line in (b"\r\n", b"\n"):
                    break
            self.messages.put(json.loads(stream.read(length)))

    def send_bytes(self, body: bytes) -> None:
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.process.stdin.flush()

    def send(self, message: dict) -> None:
        self.send_bytes(json.dumps({"jsonrpc": "2.0", **message}).encode())

    def response(self, request_id: Any) -> dict:
        while True:
            message = self.messages.get(timeout=WAIT)
            if message.get("id") == request_id and "method" not in message:
                return message
            self.notifications.append(message)

    def diagnostics(self, uri: str, version: int) -> list[dict]:
        def match(m: dict) -> bool:
            return (m.get("method") == "textDocument/publishDiagnostics"
                    and m["params"]["uri"] == uri and m["params"].get("version") == version)
        while True:
            found = [m for m in self.notifications if match(m)]
            if found:
                return found[-1]["params"]["diagnostics"]
            self.notifications.append(self.messages.get(timeout=WAIT))


def test_malformed_messages_get_protocol_errors_and_the_server_keeps_serving(workspace: Path) -> None:
    client = RawClient(workspace)
    uri = (workspace / "kern.py").as_uri()
    try:
        client.send({"id": 1, "method": "initialize", "params": {"processId": None, "rootUri": workspace.as_uri(),
                                                                 "capabilities": {}}})
        assert "capabilities" in client.response(1)["result"]
        client.send({"method": "initialized", "params": {}})

        client.send_bytes(b"{this is not json")                                    # a broken frame
        assert client.response(None)["error"]["code"] == -32700                    # ParseError, id null
        client.send_bytes(b"\x81\x82 not utf-8")                                   # undecodable bytes
        assert client.response(None)["error"]["code"] == -32700
        client.send({"method": "textDocument/didOpen", "params": {"textDocument": 5}})  # bad notification
        client.send({"id": 2, "method": "textDocument/hover", "params": {"textDocument": 5}})
        assert client.response(2)["error"]["code"] == -32602                       # InvalidParams
        client.send({"id": 3, "method": "kanalyze/noSuchMethod", "params": {}})
        assert client.response(3)["error"]["code"] == -32601                       # MethodNotFound
        client.send({"id": 4, "method": "workspace/executeCommand",
                     "params": {"command": "kanalyze.explain", "arguments": ["NOPE01"]}})
        assert client.response(4)["error"]["code"] == -32602
        client.send({"id": 5, "method": "textDocument/hover", "params": {
            "textDocument": {"uri": (workspace / "never-opened.py").as_uri()}, "position": {"line": 0, "character": 0}}})
        assert client.response(5)["result"] is None

        # And after all that, a document still gets its diagnostics.
        client.send({"method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": uri, "languageId": "python", "version": 1, "text": TF32_KERNEL}}})
        [diagnostic] = client.diagnostics(uri, 1)
        assert diagnostic["code"] == "PRC001" and diagnostic["range"]["start"] == {"line": DOT_LINE, "character": DOT_START}

        client.send({"id": 6, "method": "shutdown"})
        assert client.response(6).get("error") is None
        client.send({"method": "exit"})
        assert client.process.wait(timeout=WAIT) == 0
    finally:
        if client.process.poll() is None:
            client.process.kill()
            client.process.wait()
        client.log.close()


def test_exit_without_shutdown_exits_1(workspace: Path) -> None:
    client = RawClient(workspace)
    try:
        client.send({"id": 1, "method": "initialize", "params": {"processId": None, "capabilities": {}}})
        assert "capabilities" in client.response(1)["result"]
        client.send({"method": "exit"})
        assert client.process.wait(timeout=WAIT) == 1
    finally:
        if client.process.poll() is None:
            client.process.kill()
            client.process.wait()
        client.log.close()


# --- the command line around the server -----------------------------------------------------


def test_lsp_without_pygls_says_what_to_install() -> None:
    code = "import sys; sys.modules['pygls'] = None; from kanalyze.cli import main; sys.exit(main(['lsp']))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=WAIT)
    assert result.returncode == 2
    assert "install kanalyze[lsp]" in result.stderr


def test_check_does_not_import_the_server(workspace: Path) -> None:
    code = ("import sys; from kanalyze.cli import main; main(['check', '--no-cache', 'kern.py']); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pygls', 'lsprotocol') or m.startswith('kanalyze.lsp')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=workspace, timeout=WAIT)
    assert "PRC001" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_the_servers_analysis_never_loads_the_dynamic_pass() -> None:
    """What the worker runs on every keystroke: the static pass, without torch, triton or a gate."""
    code = textwrap.dedent(f'''
        import sys
        from kanalyze.lsp.analysis import analyze_document
        findings, _ = analyze_document("kern.py", {TF32_KERNEL!r}, "python")
        print([f.code for f in findings])
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "triton") or m.startswith("kanalyze.dynamic")))
    ''')
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=WAIT)
    assert result.stdout.splitlines() == ["['PRC001']", "[]"], result.stdout + result.stderr


def test_lsp_accepts_the_stdio_flag_editors_pass() -> None:
    """`kanalyze lsp --stdio` is what most clients send; it starts the server (which waits on stdin)."""
    import subprocess

    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-m", "kanalyze", "lsp", "--stdio"], input="", capture_output=True,
                          text=True, timeout=60, cwd=root)
    assert "unrecognized arguments" not in done.stderr and done.returncode != 2, done.stderr[-500:]
