"""Names read as Python reads them: folded to NFKC (PEP 3131), whatever their spelling.

A kernel spelled `ｔｌ.ｍａｘｉｍｕｍ` runs as `tl.maximum`; the static pass must see
the same findings as in the plain spelling, at the user's rows and columns, and
report each odd spelling as INT001.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest

from kanalyze.analyzer.cuda.inline_plain import read_plain
from kanalyze.analyzer.sources import may_contain_triton
from kanalyze.analyzer.spelling import python_spelling
from kanalyze.check import analyze_source, analyze_text

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def fullwidth(word: str) -> str:
    """`tl` → `ｔｌ`: the fullwidth forms of ASCII letters (same length, NFKC folds them back)."""
    return "".join(chr(ord(c) + 0xFEE0) if c.isalpha() else c for c in word)


def findings_without_int001(path: str, text: str) -> list[tuple]:
    findings, _ = analyze_text(path, text)
    return [(f.code, f.location.row, f.location.column, f.location.end_row, f.location.end_column, f.message)
            for f in findings if f.code != "INT001"]


def int001_messages(text: str) -> list[tuple[int, int, str]]:
    findings, _ = analyze_text("kernel.py", text)
    return [(f.location.row, f.location.column, f.message) for f in findings if f.code == "INT001"]


# --- the text the parser reads --------------------------------------------------------

def test_names_are_folded_and_comments_and_strings_are_not() -> None:
    text = 'ｔｌ.ｍａｘｉｍｕｍ(x, 0.0)  # ｔｌ.ｍａｘｉｍｕｍ\nlabel = "ｔｌ.ｍａｘｉｍｕｍ"\n'
    spelling = python_spelling(text)
    assert spelling.text == 'tl.maximum(x, 0.0)  # ｔｌ.ｍａｘｉｍｕｍ\nlabel = "ｔｌ.ｍａｘｉｍｕｍ"\n'
    assert [(r.raw, r.folded, r.start) for r in spelling.respellings] == [("ｔｌ", "tl", 0), ("ｍａｘｉｍｕｍ", "maximum", 3)]


def test_pieces_the_tokenizer_splits_are_one_name() -> None:
    # Python 3.11's tokenize reads `＿` (fullwidth low line) and a combining accent as
    # error tokens next to the name; Python itself reads one identifier.
    spelling = python_spelling("ｍａｘ＿ｉｔ = cafe\u0301\n")
    assert spelling.text == "max_it = caf\u00e9\n"


@pytest.mark.parametrize("text", ["0xｆｆ\n", "1ｅ5\n", 'ｆ"{x}"\n'])
def test_names_glued_to_literals_stay_raw(text: str) -> None:
    # Python rejects these; folded they would turn into a hex number, a float, an f-string.
    assert python_spelling(text).text == text


def test_a_name_that_folds_to_a_keyword_stays_raw_but_is_reported() -> None:
    # `ｉｆ = 3` binds the *name* "if" in Python: no plain spelling means the same.
    spelling = python_spelling("import triton\nｉｆ = 3\n")
    assert spelling.text == "import triton\nｉｆ = 3\n"
    assert [(r.raw, r.folded, r.rewritten) for r in spelling.respellings] == [("ｉｆ", "if", False)]
    assert int001_messages("import triton\nｉｆ = 3\n@triton.jit\ndef k(x):\n    pass\n") == [
        (2, 1, "`ｉｆ` is spelled with compatibility characters; Python reads it as `if`: write it as `if`")]


def test_offsets_map_back_through_names_that_change_length() -> None:
    spelling = python_spelling("ﬁ = ﬁx + 1\n")          # `ﬁ` (one character) folds to `fi` (two)
    assert spelling.text == "fi = fix + 1\n"
    assert spelling.resized
    assert [spelling.to_user(o) for o in (0, 2, 3, 5, 8, 12)] == [0, 1, 2, 4, 6, 10]


@pytest.mark.parametrize("text", [
    "x = (ｔｌ\n",                           # tokenize stops at the end of the file
    "def f():\n  ｘ = 1\n ｙ = 2\n",          # a dedent that matches no indent
    "x = '''ｔｌ\n",                          # an unterminated string
    "ｔｌ\\\n",                               # a continuation at the end of the file
    "x = 'ｔｌ' \x00 ｔｌ\n",
    "\tｉｆ x:\n        ｙ\n",
])
def test_odd_input_never_raises_and_parses_as_before(text: str) -> None:
    python_spelling(text)
    findings, _ = analyze_text("odd.py", "import triton\n# jit\n" + text)
    plain_errors = [f.message for f in findings if f.code == "KAN000"]
    assert plain_errors, "each of these is a syntax error in Python too"


# --- the same findings as the plain spelling ----------------------------------------------

def test_a_fullwidth_kernel_has_the_plain_kernels_findings_at_the_same_places() -> None:
    plain = (FIXTURES / "triton" / "exc001_relu_maximum.py").read_text(encoding="utf-8")
    odd = plain.replace("import triton.language as tl", f"import triton.language as {fullwidth('tl')}") \
        .replace("@triton.jit", f"@triton.{fullwidth('jit')}") \
        .replace("tl.maximum(", f"{fullwidth('tl')}.{fullwidth('maximum')}(")
    expected = findings_without_int001("plain.py", plain)
    assert any(code == "EXC001" for code, *_ in expected)
    assert findings_without_int001("plain.py", odd) == expected
    # One INT001 per odd name: the import, 4 decorators and 3 `ｔｌ.ｍａｘｉｍｕｍ` calls (2 names each).
    assert len(int001_messages(odd)) == 1 + 4 + 3 * 2


def test_atomic_add_spelled_in_fullwidth_is_a_float_atomic() -> None:
    text = (FIXTURES / "triton" / "ord001_atomic_sum_reduction.py").read_text(encoding="utf-8")
    odd = text.replace("tl.atomic_add(out_ptr, partial)", f"tl.{fullwidth('atomic')}_{fullwidth('add')}(out_ptr, partial)")
    assert odd != text
    assert findings_without_int001("ord.py", odd) == findings_without_int001("ord.py", text)


def test_findings_after_a_ligature_are_at_the_users_columns() -> None:
    # `ﬁ` is one character that Python reads as two: everything after it on the line
    # is one column further left in the user's text than in the text LibCST parsed.
    text = ("import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef k(x_ptr):\n"
            "    x = tl.load(x_ptr)\n    ﬁ = 1; y = tl.maximum(x, 0.0)  # noqa: ORD001\n    tl.store(x_ptr, y)\n")
    findings, _ = analyze_text("lig.py", text)
    line = text.splitlines()[7]
    exc = [f for f in findings if f.code == "EXC001"]
    assert [(f.location.row, f.location.column, f.location.end_column) for f in exc] == [
        (8, line.index("tl.maximum") + 1, line.index("  # noqa") + 1)]
    int001 = [f for f in findings if f.code == "INT001"]
    assert [(f.location.row, f.location.column, f.location.end_column) for f in int001] == [(8, 5, 6)]


def test_noqa_reads_the_users_line() -> None:
    text = "import triton\nimport triton.language as ｔｌ  # noqa: INT001\n@triton.jit\ndef k(x):\n    pass\n"
    findings, suppressed = analyze_text("noqa.py", text)
    assert [f.code for f in findings if f.code == "INT001"] == []
    assert suppressed == 1


def test_a_file_whose_only_jit_is_fullwidth_is_still_analyzed() -> None:
    text = f"import triton\nimport triton.language as tl\n\n@triton.{fullwidth('jit')}\ndef k(x_ptr):\n" \
           f"    tl.store(x_ptr, tl.maximum(tl.load(x_ptr), 0.0))\n"
    assert may_contain_triton(text)
    assert not may_contain_triton("import triton\n# ｔｒｉｔｏｎ, no kernel decorator here\n")
    findings, _ = analyze_source("only_fullwidth_jit.py", text)
    assert {f.code for f in findings} >= {"EXC001", "INT001"}


# --- what is not a finding ---------------------------------------------------------------

@pytest.mark.parametrize("name", ["café", "α", "変数", "ﬁx"])
def test_only_names_nfkc_changes_are_findings(name: str) -> None:
    text = f"import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x_ptr, {name}):\n" \
           f"    tl.store(x_ptr, {name})\n"
    messages = int001_messages(text)
    if unicodedata.is_normalized("NFKC", name):
        assert messages == []
    else:
        folded = unicodedata.normalize("NFKC", name)
        assert [m for _, _, m in messages] == [
            f"`{name}` is spelled with compatibility characters; Python reads it as `{folded}`: write it as `{folded}`"
        ] * 2


def test_a_decomposed_accent_is_named_as_such() -> None:
    text = "import triton\n\n@triton.jit\ndef k(cafe\u0301):\n    pass\n"
    assert [m for _, _, m in int001_messages(text)] == [
        "`cafe\u0301` is spelled with combining characters; Python reads it as `caf\u00e9`: write it as `caf\u00e9`"]


# --- Python files that build CUDA ---------------------------------------------------------

def test_inline_cuda_files_with_odd_names_take_the_path_that_reports_them() -> None:
    plain = (FIXTURES / "kernelbench" / "candidates" / "level1_problem1_mse_atomic_cuda.py").read_text(encoding="utf-8")
    # `ﬁle_source` is one character shorter than Python's `file_source`, before the CUDA string.
    odd = plain.replace("load_inline", fullwidth("load") + "_" + fullwidth("inline")) \
        .replace("cuda_source =", "ﬁle_source =").replace("cuda_sources=cuda_source", "cuda_sources=ﬁle_source")
    assert read_plain("inline.py", plain) is not None   # the fast path reads the plain file
    assert read_plain("inline.py", odd) is None         # ... and leaves the odd one to LibCST
    findings, _ = analyze_source("inline.py", odd)
    plain_findings, _ = analyze_source("inline.py", plain)
    assert [(f.code, f.location.row, f.location.column) for f in plain_findings] == [("ORD001", 21, 9)]
    assert [(f.code, f.location.row, f.location.column) for f in findings if f.code != "INT001"] == [("ORD001", 21, 9)]
    assert len([f for f in findings if f.code == "INT001"]) == 2 + 2   # `ｌｏａｄ_ｉｎｌｉｎｅ` twice, `ﬁle_source` twice
