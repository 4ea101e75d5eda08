"""What the user can do with a published diagnostic: hover it, suppress it on its
line (`# noqa: CODE`, `// NOLINT: CODE`), or open its clause's docs ("Explain")."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any, Protocol

from lsprotocol import types

from kanalyze.lsp.analysis import CUDA
from kanalyze.lsp.convert import LineEdit, contains, hover_markdown, overlaps, suppression_edit
from kanalyze.lsp.documents import DocState, Published
from kanalyze.rules import rules_by_code



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


def code_actions(ls: KanalyzeServer, state: DocState, published: Published,
                 selection: types.Range) -> list[types.CodeAction]:
    """For each diagnostic in the selection: suppress it on its line, and (once a clause) explain it."""
    actions: list[types.CodeAction] = []
    explained: set[str] = set()
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
                edit=_workspace_edit(ls, state.uri, published, edit),
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


def _workspace_edit(ls: KanalyzeServer, uri: str, published: Published, edit: LineEdit) -> types.WorkspaceEdit:
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
