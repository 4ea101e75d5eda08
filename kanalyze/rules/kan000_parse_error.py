"""KAN000 parse-error: a file could not be read or parsed, so it was not analyzed.

This clause is decided by its gate; kanalyze reports it itself.
"""

from kanalyze.rules.base import Rule


class ParseError(Rule):
    code = "KAN000"
    name = "parse-error"
    summary = "A file could not be read or parsed, so it was not analyzed"
    gate = ""
    has_detectors = False
    docs = """
    ## What it does
    Reports a file kanalyze could not analyze: it does not parse, is not valid
    UTF-8 (or its declared encoding), is binary, empty, too large, or uses
    syntax LibCST cannot read.  The reason is in the message.

    ## Why is this bad
    A kernel that is not analyzed is not checked: a clean report would be a
    false assurance.  The run goes on with the other files.

    ## Example
    ```python
    @triton.jit
    def kernel(x_ptr
    ```

    ## Use instead
    Fix the syntax or the encoding, or exclude the file (`exclude` in
    `[tool.kanalyze]`, or `--force-exclude` for files passed explicitly).
    """
