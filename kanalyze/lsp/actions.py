"""What the user can do with a published diagnostic: hover it, fix it (kanalyze/fixes/:
the same edits as `kanalyze check --fix`, unsafe ones marked so), suppress it on its
line (`# noqa: CODE`, `// NOLINT: CODE`), or open its clause's docs ("Explain", a
command rather than a quick fix: it changes nothing in the file)."""

from __future__ import annotations

import asyncio
import re
import tempfile
from pathlib import Path
from typing import Any, Protocol

from lsprotocol import types

from kanalyze.findings import Finding
from kanalyze.lsp.analysis import CUDA
from kanalyze.lsp.convert import LineEdit, contains, hover_markdown, overlaps, split_lines, suppression_edit
from kanalyze.lsp.documents import DocState, Published
from kanalyze.rules import rules_by_code

_LINE_END = re.compile(r"\r\n|\r|\n")



class KanalyzeServer(Protocol):
    """What the actions use of the language server (server.py's KanalyzeServer)."""

    workspace: Any
    client_capabilities: types.ClientCapabilities
    docs_dir: str | None

    def log(self, message: str, kind: types.MessageType = ...) -> None: ...

    def window_show_message(self, params: types.ShowMessageParams) -> None: ...

    def window_show_document_async(self, params: types.ShowDocumentParams) -> Any: ...

EXPLAIN_COMMAND = "kanalyze.explain"


def hover(published: Published, position: types.Position) -> types.Hover | None:
    """The findings under the cursor, as markdown; None where there are none."""
    hits = [(f, d) for f, d in zip(published.findings, published.diagnostics) if contains(d.range, position)]
    if not hits:
        return None
    text = hover_markdown([(f, d.data["status"]) for f, d in hits])
    return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text),
                       range=hits[0][1].range)


def code_actions(ls: KanalyzeServer, state: DocState, published: Published, selection: types.Range,
                 only: list[str] | None = None) -> list[types.CodeAction]:
    """For each diagnostic in the selection: suppress it on its line, fix it where a fix
    applies, and (once a clause) explain it.  `only`: the kinds the client asked for."""
    actions: list[types.CodeAction] = []
    explained: set[str] = set()
    document = _document_text(ls, state, published)
    for finding, diagnostic in zip(published.findings, published.diagnostics):
        if not overlaps(diagnostic.range, selection):
            continue
        edit = suppression_edit(published.lines, finding, state.kind)
        if edit is not None:
            marker = "// NOLINT" if state.kind == CUDA else "# noqa"
            actions.append(types.CodeAction(
                title=f"Suppress {finding.code} on this line ({marker}: {finding.code})",
                kind=types.CodeActionKind.QuickFix,
                diagnostics=[diagnostic],
                edit=_workspace_edit(ls, state.uri, published, [_line_edit(ls, published, edit)]),
            ))
        actions += _fix_actions(ls, state, published, document, finding, diagnostic)
        if finding.code not in explained and finding.code in rules_by_code():
            explained.add(finding.code)
            actions.append(types.CodeAction(  # no kind: a command to read the docs, not a fix
                title=f"Explain {finding.code} ({finding.name})",
                diagnostics=[diagnostic],
                command=types.Command(title=f"Explain {finding.code}", command=EXPLAIN_COMMAND,
                                      arguments=[finding.code]),
            ))
    if only:
        actions = [a for a in actions if a.kind and any(a.kind == k or a.kind.startswith(k + ".") for k in only)]
    return actions


class _Text:
    """The document's text, parsed for the fixes the first time one is asked for."""

    def __init__(self, text: str | None) -> None:
        self.text = text
        self._source: Any = None

    def source(self) -> Any:
        if self._source is None and self.text is not None:
            from kanalyze.fixes import Source

            try:
                self._source = Source(self.text)
            except Exception:  # text LibCST cannot parse: no fixes
                self.text = None
        return self._source


def _document_text(ls: KanalyzeServer, state: DocState, published: Published) -> _Text:
    """The text the published findings were made from (None where it is not at hand)."""
    if state.kind == CUDA:
        return _Text(None)  # no fix edits CUDA C++
    try:
        text = ls.workspace.get_text_document(state.uri).source
    except Exception:
        return _Text(None)
    return _Text(text if split_lines(text) == published.lines else None)


def _fix_actions(ls: KanalyzeServer, state: DocState, published: Published, document: _Text,
                 finding: Finding, diagnostic: types.Diagnostic) -> list[types.CodeAction]:
    """The fixes of one finding as quick fixes: the same edits as `kanalyze check --fix`;
    a safe fix is the preferred action, an unsafe one says so in its title."""
    from kanalyze.fixes import FIXED_CODES, fixes_for

    if finding.code not in FIXED_CODES or document.source() is None:
        return []
    actions = []
    for fix in fixes_for(finding, document.source()):
        edits = [_text_edit(ls, document.text, edit.start, edit.end, edit.content) for edit in fix.edits]
        actions.append(types.CodeAction(
            title=f"Fix {finding.code}: {fix.title}" + ("" if fix.safe else " (unsafe)"),
            kind=types.CodeActionKind.QuickFix,
            diagnostics=[diagnostic],
            is_preferred=fix.safe or None,
            edit=_workspace_edit(ls, state.uri, published, edits),
        ))
    return actions


def _text_edit(ls: KanalyzeServer, text: str, start: int, end: int, content: str) -> types.TextEdit:
    """Characters [start, end) of the document replaced, as an LSP edit in the client's units."""
    units = ls.workspace.position_codec.client_num_units

    def position(offset: int) -> types.Position:
        line_start = max(text.rfind("\n", 0, offset), text.rfind("\r", 0, offset)) + 1
        line = len(_LINE_END.findall(text, 0, line_start))
        return types.Position(line=line, character=units(text[line_start:offset]))

    return types.TextEdit(range=types.Range(start=position(start), end=position(end)), new_text=content)


def _line_edit(ls: KanalyzeServer, published: Published, edit: LineEdit) -> types.TextEdit:
    units = ls.workspace.position_codec.client_num_units
    line = published.lines[edit.line]
    return types.TextEdit(
        range=types.Range(start=types.Position(line=edit.line, character=units(line[: edit.start])),
                          end=types.Position(line=edit.line, character=units(line[: edit.end]))),
        new_text=edit.text,
    )


def _workspace_edit(ls: KanalyzeServer, uri: str, published: Published,
                    text_edits: list[types.TextEdit]) -> types.WorkspaceEdit:
    capabilities = ls.client_capabilities
    versioned = (capabilities.workspace and capabilities.workspace.workspace_edit
                 and capabilities.workspace.workspace_edit.document_changes)
    if versioned:
        # Tied to the analyzed version: a client refuses it once the text has changed.
        return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(
            text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=published.version),
            edits=text_edits)])
    return types.WorkspaceEdit(changes={uri: text_edits})


async def show_explanation(ls: KanalyzeServer, code: str, markdown: str) -> None:
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
