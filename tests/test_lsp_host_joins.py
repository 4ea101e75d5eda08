"""How the editor's layout cuts files with host code, and what it keeps in every piece.

A generated module of kernel+wrapper pairs (written here) is cut into one piece
per pair, the first pair, which holds the first launch, in every piece.  These
tests check that an edit re-analyzes one piece, that each fact the whole file
says about a unit (the first launch, ModelNew, a global written in one function
and returned in another, a class name defined twice, an import inside a
function, a shape pinned where a tensor of that name is launched elsewhere)
reaches the pieces that need it, and what the layout leaves whole.  Every
analysis is compared with the whole one (test_lsp_incremental_host.py holds the
oracle and tests it on the fixtures and ecosystem files).
"""

from __future__ import annotations

import pytest
from test_lsp_incremental_host import PROOFS_OFF, same_as_whole

from kanalyze.lsp.analysis import analyze_document
from kanalyze.lsp.incremental import IncrementalAnalyzer
from kanalyze.lsp.layout import Layout, cut


# --- a file of kernel+wrapper pairs ------------------------------------------------------

HEADER = "import torch\nimport triton\nimport triton.language as tl\n"
PAIR = '''

@triton.jit
def scale_{i}_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * {i}.0, mask=mask)


def scale_{i}(x):
    y = torch.empty_like(x)
    n = x.numel()
    scale_{i}_kernel[(triton.cdiv(n, 256),)](x, y, n, BLOCK=256)
    return y
'''
PATH = "/workspace/pairs.py"


def pairs(count: int = 5, extra: str = "") -> str:
    return HEADER + "".join(PAIR.format(i=i) for i in range(count)) + extra


def test_an_edit_in_one_kernel_reanalyzes_only_its_piece() -> None:
    text = pairs()
    layout = cut(text)
    # The first pair holds the first launch: it is in every piece; the other four are a piece each.
    assert isinstance(layout, Layout) and len(layout.pieces) == 4
    assert all("def scale_0(" in piece.text and "def scale_0_kernel(" in piece.text for piece in layout.pieces)
    analyzer = IncrementalAnalyzer()
    same_as_whole(analyzer, PATH, text)
    before = dict(analyzer.stats)
    kernel_edit = text.replace("x * 3.0", "tl.maximum(x, 0.0) * 3.0")
    [finding] = same_as_whole(analyzer, PATH, kernel_edit)  # the NaN-dropping maximum, in scale_3_kernel
    assert finding.code == "EXC001" and finding.kernel == "scale_3_kernel"
    assert analyzer.stats["analyzed"] == before["analyzed"] + 1
    assert analyzer.stats["kept"] == before.get("kept", 0) + 3
    assert analyzer.stats["cut"] == 2 and analyzer.stats["whole"] == 0


def test_an_edit_in_one_wrapper_reanalyzes_only_its_piece() -> None:
    text = pairs()
    analyzer = IncrementalAnalyzer()
    same_as_whole(analyzer, PATH, text)
    analyzed = analyzer.stats["analyzed"]
    wrapper_edit = text.replace("scale_2_kernel[(triton.cdiv(n, 256),)]", "scale_2_kernel[(n // 256,)]")
    findings = same_as_whole(analyzer, PATH, wrapper_edit)  # the grid rounds down: CMP003 and MEM001
    assert {f.code for f in findings} == {"CMP003", "MEM001"}
    assert analyzer.stats["analyzed"] == analyzed + 1
    # An edit to the pair every piece holds changes every piece.
    first_edit = text.replace("x * 0.0", "x * 0.5")
    same_as_whole(analyzer, PATH, first_edit)
    assert analyzer.stats["analyzed"] == analyzed + 1 + 4


def test_noqa_in_a_piece_and_in_the_context_is_counted_as_the_whole_counts() -> None:
    launch = "scale_{i}_kernel[(triton.cdiv(n, 256),)](x, y, n, BLOCK=256)"
    floored = "scale_{i}_kernel[(n // 256,)](x, y, n, BLOCK=256)"
    text = pairs().replace(launch.format(i=2), floored.format(i=2) + "  # noqa: CMP003") \
        .replace(launch.format(i=0), floored.format(i=0) + "  # noqa")
    analyzer = IncrementalAnalyzer()
    findings = same_as_whole(analyzer, PATH, text)
    assert [f.code for f in findings] == ["MEM001", "MEM001"] and analyzer.stats["cut"] == 1
    assert analyze_document(PATH, text, "python", PROOFS_OFF)[1] == 2  # one CMP003 in the context, one in a piece


def test_with_the_proofs_on_a_launching_text_is_analyzed_whole() -> None:
    analyzer = IncrementalAnalyzer()
    same_as_whole(analyzer, PATH, pairs(3), proofs={})
    assert analyzer.stats["whole"] == 1 and analyzer.stats["cut"] == 0
    same_as_whole(analyzer, PATH, pairs(3), proofs={"proofs": False})
    assert analyzer.stats["cut"] == 1


def test_a_kernel_nothing_launches_sends_the_text_whole() -> None:
    """RES001's finding on a kernel nothing launches lists every kernel the file launches."""
    dead = '''

@triton.jit
def unused_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
'''
    text = pairs(4, dead)
    assert isinstance(cut(text), Layout)
    analyzer = IncrementalAnalyzer()
    findings = same_as_whole(analyzer, PATH, text)
    assert [f.evidence.get("launched") for f in findings if f.code == "RES001"] == [
        [f"scale_{i}_kernel" for i in range(4)]]
    assert analyzer.stats["whole"] == 1


# --- how the layout joins units, and what it leaves whole ---------------------------------

def component_of(layout: Layout, needle: str) -> str:
    return next(piece.text for piece in layout.pieces if needle in piece.text)


def test_a_model_new_class_is_in_every_piece() -> None:
    model = "\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return scale_1(x)\n"
    layout = cut(pairs(4, model))
    assert isinstance(layout, Layout) and len(layout.pieces) == 2
    assert all("class ModelNew" in p.text and "def scale_1(" in p.text for p in layout.pieces)


def test_units_that_share_state_or_names_are_joined() -> None:
    shared = '''

_CACHE = {}


def fill(x):
    _CACHE["y"] = scale_1(x)


def read(x):
    return _CACHE["y"]


def pins(w):
    assert w.shape[0] == 3
    return scale_2(w)


def passes(w):
    y = torch.empty_like(w)
    scale_3_kernel[(1,)](w, y, 3, BLOCK=4)
    return y


def importer():
    import math as maths
    return 1


def user():
    return maths.pi


class Twin:
    pass


def other():
    class Twin:
        pass
    return Twin


def first_helper():
    @triton.jit
    def inner(x):
        return x
    return 1


def second_helper():
    @triton.jit
    def inner(x):
        return x + 1
    return 2
'''
    layout = cut(pairs(4, shared))
    assert isinstance(layout, Layout)
    assert "def read(" in component_of(layout, "def fill(")            # a module global written by key
    assert "def passes(" in component_of(layout, "def pins(")          # a pinned shape, a tensor launched
    assert "def user(" in component_of(layout, "def importer(")        # an import inside a function
    assert "def other(" in component_of(layout, "class Twin")          # one class name, twice
    assert "def second_helper(" in component_of(layout, "def first_helper(")  # one jit function's name, twice
    assert "def fill(" not in component_of(layout, "def pins(")
    same_as_whole(IncrementalAnalyzer(), PATH, pairs(4, shared))


def test_a_unit_that_reaches_into_the_context_joins_it() -> None:
    """`scaled = scale_1` puts scale_1 in every piece; a unit calling `scaled` (or
    scale_1 itself) then changes what is known of it, so it joins the context too."""
    text = pairs(4, "\n\nscaled = scale_1\n\n\ndef twice(x):\n    return scaled(scaled(x))\n")
    layout = cut(text)
    assert isinstance(layout, Layout)
    assert "def twice(" in layout.context.text and "def scale_1(" in layout.context.text
    same_as_whole(IncrementalAnalyzer(), PATH, text)


@pytest.mark.parametrize("extra, reason", [
    ("\nscale_0_kernel[(1,)](None, None, 0, BLOCK=4)\n", "none surely a launch"),
    ("", "forward"),
    ("\n\ndef sync():\n    torch.npu.synchronize()\n", "Ascend"),
    ("\n\ndef load():\n    import numpy as tl\n", "imported twice"),
    ("\n# kanalyze: noqa\n", "file-level"),
])
def test_what_is_left_whole(extra: str, reason: str) -> None:
    if reason == "forward":  # no launch at all, and a forward: the forward path is the file's
        text = HEADER + "".join(PAIR.format(i=i).split("\n\ndef scale_")[0] for i in range(3)) + \
            "\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
    elif reason == "none surely a launch":  # launched only at the module level, and only from a test
        text = HEADER + "".join(PAIR.format(i=i).split("\n\ndef scale_")[0] for i in range(3)) + extra + \
            "\n\ndef test_scale(x):\n    scale_1_kernel[(1,)](x, x, 0, BLOCK=4)\n"
    else:
        text = pairs(3, extra)
    layout = cut(text)
    assert isinstance(layout, str) and reason in layout


# Each text holds a fact that one piece would not see unless the layout put it there; each
# finding is what the whole file says because of it (and what a piece alone would miss).
READER_OF_THE_FIRST_LAUNCH = '''

def api(x):
    y = scale_2(x)
    return torch.relu(y)
'''
MODEL_NEW_AND_A_DEVICE_FUNCTION = '''

@triton.jit
def product(a, b):
    return tl.dot(a, b)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return scale_1(x)
'''
PIN_AND_SAME_NAMED_TENSOR = '''

@triton.jit
def gray_kernel(w_ptr, x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    total = tl.load(w_ptr + 0) + tl.load(w_ptr + 1) + tl.load(w_ptr + 2)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * total, mask=mask)


def gray(w, x):
    assert w.shape[0] == 3
    y = torch.empty_like(x)
    n = x.numel()
    gray_kernel[(triton.cdiv(n, 256),)](w, x, y, n, BLOCK=256)
    return y


def spread(w):
    y = torch.empty_like(w)
    scale_2_kernel[(triton.cdiv(w.numel(), 256),)](w, y, w.numel(), BLOCK=256)
    return y
'''
GLOBAL_WRITTEN_AND_RETURNED = '''

_CACHE = {}


def remember(x):
    _CACHE[x.shape] = scale_1(x)


def cached(x):
    if x.shape in _CACHE:
        return _CACHE[x.shape]
    y = torch.empty_like(x)
    scale_3_kernel[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
    return y
'''
ONE_CLASS_NAME_TWICE = '''

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 3, 3)


def build():
    class Net(torch.nn.Module):
        def forward(self, x):
            return scale_2(self.conv(x))
    return locals()
'''
IMPORT_IN_A_FUNCTION = '''

def setup():
    import torch.nn.functional as nnf
    return nnf


def act(x):
    return nnf.gelu(scale_2(x))
'''


@pytest.mark.parametrize("extra, code, words", [
    (READER_OF_THE_FIRST_LAUNCH, "RES001", "move the work into `scale_0_kernel`"),  # the file's first launch
    (MODEL_NEW_AND_A_DEVICE_FUNCTION, None, ""),     # PRC001 skips what never runs in a ModelNew file
    # The count is gray_kernel's definition (its launch reads w[0..2]); `spread`'s `w` is another
    # tensor: nothing to report, and the pieces agree with the whole file on that.
    (PIN_AND_SAME_NAMED_TENSOR, None, ""),
    (GLOBAL_WRITTEN_AND_RETURNED, "INT001", "returns a result stored by an earlier call"),
    (ONE_CLASS_NAME_TWICE, "RES001", "the `nn.Conv2d` layer"),  # layers are kept per class name
    (IMPORT_IN_A_FUNCTION, "RES001", "`F.gelu`"),    # the import map is the file's
], ids=["first-launch", "model-new", "pinned-shape", "global-cache", "class-name", "nested-import"])
def test_what_the_whole_file_says_is_in_every_piece_that_needs_it(extra: str, code: str | None, words: str) -> None:
    text = pairs(4, extra)
    layout = cut(text)
    assert isinstance(layout, Layout) and len(layout.pieces) >= 2
    analyzer = IncrementalAnalyzer()
    findings = same_as_whole(analyzer, PATH, text)
    assert analyzer.stats["cut"] == 1
    assert [f.code for f in findings] == ([code] if code else []) and words in "".join(f.message for f in findings)
