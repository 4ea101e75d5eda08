"""The editor server: `kanalyze lsp` (pygls, stdio).

    server.py    the language server: document sync, debounce, settings,
                 diagnostics, code actions, hover, the explain command
    convert.py   findings → LSP diagnostics, `# noqa` edits, hover text,
                 witnesses found in `.kanalyze/witnesses/`
    worker.py    the child process that runs the static pass, so that a crash
                 or a hang on one document never takes the server down
    analysis.py  one document's text → findings (the function every kind of
                 source goes through)

Only server.py and convert.py import pygls/lsprotocol; the worker does not,
and nothing here is imported by `kanalyze check`.
"""
