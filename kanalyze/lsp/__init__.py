"""The editor server: `kanalyze lsp` (pygls, stdio).

    server.py         the language server and its handlers: document sync,
                      settings, diagnostics, the explain command
    settings.py       the client's settings (section "kanalyze")
    configuration.py  `[tool.kanalyze]` for an open document, cached per pyproject stamp
    documents.py      what the server knows of each open document; debouncing
    runner.py         analyses off the event loop: the worker, one thread, results per text
    actions.py        hover, quick fixes (`# noqa` edits), "Explain"
    protocol.py       JSON-RPC that answers malformed requests instead of dropping them
    convert.py        findings → LSP diagnostics, `# noqa` edits, hover text,
                      witnesses found in `.kanalyze/witnesses/`
    worker.py         the child process that runs the static pass, so that a crash
                      or a hang on one document never takes the server down
    incremental.py    what the worker runs: the findings of a text, re-analyzing only
                      the kernels an edit touched and keeping the others' findings
    layout.py         a text cut into pieces analyzed apart (the context and one group
                      of kernels each), or why it is analyzed whole
    analysis.py       one document's text → findings (the function every kind of
                      source goes through)

The worker, incremental.py, layout.py and analysis.py do not import
pygls/lsprotocol, and nothing here is imported by `kanalyze check`.
"""
