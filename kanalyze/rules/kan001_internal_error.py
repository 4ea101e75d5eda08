"""KAN001 internal-error: a rule failed on a file; the other rules still ran."""

from kanalyze.rules.base import Rule


class InternalError(Rule):
    code = "KAN001"
    name = "internal-error"
    summary = "A kanalyze rule failed on this file; its findings for the file are missing"
    gate = ""
    has_detectors = False
    docs = """
    ## What it does
    Reports that one rule raised an error on one file.  The other rules and
    the other files are still checked.

    ## Why is this bad
    The clause that rule covers was not checked for this file.

    ## Example
    An unusual construct a detector did not expect.

    ## Use instead
    Report it with the file attached; suppress with `# kanalyze: noqa: KAN001`
    meanwhile.
    """
