"""PRC001 across modules (kanalyze/analyzer/triton/cross_launches.py, slot_args.py): a kernel
that its own module never launches takes, per pointer parameter, what every launch of it in
the other checked modules passes.

The fixture package fixtures/triton/cross_module_launches/ is checked here as a tree; the
fixture test (test_fixtures.py) checks each of its files alone, where every dot is reported.
Its `# tree ok:` / `# tree expect:` lines say what the tree check gives.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from test_project_index import by_row, check_tree, config_for, linked_in

from kanalyze.check import run_static

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "fixtures" / "triton" / "cross_module_launches"


def test_the_package_checked_as_a_tree_meets_its_tree_expectations() -> None:
    result, checked = check_tree(PACKAGE)
    assert checked >= 5
    gemm = by_row(result.findings, PACKAGE / "kernels.py")[(45, "PRC001")]
    assert "float32 in some launches" in gemm, gemm  # linear_fp32's launch: the float32 is shown


def test_checked_alone_every_dot_is_reported() -> None:
    kernels = PACKAGE / "kernels.py"
    alone = by_row(run_static([str(kernels)], config_for(kernels), use_cache=False, jobs=1).findings, kernels)
    assert sorted(row for row, code in alone if code == "PRC001") == [15, 28, 32, 45, 56]


def passed(files: dict[str, str], tmp_path: Path, module: str = "pkg/kern.py") -> dict:
    """What the index hands `module`: kernel (or launcher) → parameter → dtypes."""
    return {name: dict(params) for name, params in linked_in(files, tmp_path, module).passed}


KERN = """\
import triton
import triton.language as tl

@triton.jit
def k(a_ptr, b_ptr, c_ptr):
    tl.store(c_ptr, tl.dot(tl.load(a_ptr), tl.load(b_ptr)))
"""

PARAMS = """\
class P:
    __slots__ = ("a_ptr", "b_ptr", "c_ptr")

    def __init__(self, a_ptr, b_ptr, c_ptr):
        self.a_ptr = a_ptr
        self.b_ptr = b_ptr
        self.c_ptr = c_ptr

    def args(self):
        return tuple(getattr(self, k) for k in self.__slots__)
"""

API = "import torch\n{imp}\n\n" + PARAMS + """
def api(a, b):
    a_dtype = a.dtype
    assert a_dtype in (torch.float16, torch.bfloat16)
    assert a_dtype == b.dtype
    c = torch.empty(a.shape, dtype=torch.float32, device=a.device)
{body}
"""

HALF = ("bfloat16", "float16")
CHECKED = {"a_ptr": HALF, "b_ptr": HALF, "c_ptr": ("float32",)}
UNKNOWN = {"a_ptr": ("?",), "b_ptr": ("?",), "c_ptr": ("?",)}


def launched(tmp_path: Path, body: str, imp: str = "from .kern import k", **more: str) -> dict:
    files = {"pkg/__init__.py": "from .kern import k\n", "pkg/kern.py": KERN,
             "pkg/api.py": API.format(imp=imp, body=textwrap.indent(textwrap.dedent(body), "    ")), **more}
    return passed(files, tmp_path).get("k")


def test_each_launch_form_carries_the_launching_files_dtypes(tmp_path: Path) -> None:
    """`K[grid](...)` by position and keyword, through a module alias, a re-export, a local alias
    (`kernel = k[grid]; kernel(...)`); the asserts on a dtype alias and the equality narrow b."""
    for i, (imp, body) in enumerate((
            ("from .kern import k", "k[(1,)](a, b, c)"),
            ("from . import kern as K", "K.k[(1,)](a, b_ptr=b, c_ptr=c)"),
            ("from pkg import k", "k[(1,)](a, b, c)"),
            ("import pkg.kern", "pkg.kern.k[(1,)](a, b, c)"),
            ("from .kern import k", "kernel = k[(1,)]\nkernel = kernel(a, b, c)\nreturn kernel"))):
        assert launched(tmp_path / str(i), body, imp) == CHECKED, (imp, body)


def test_a_params_objects_slots_are_the_launchs_arguments(tmp_path: Path) -> None:
    """`*p.args()`, or `*args` with `args = tuple(getattr(p, k) for k in p.__slots__)`: positional
    parameter i gets what slot i holds, its constructor argument or a later store."""
    assert launched(tmp_path / "method", "p = P(a, b, c)\nk[(1,)](*p.args())") == CHECKED
    found = launched(tmp_path / "tuple", """\
        p = P(a, b, c_ptr=c)
        if a.shape[0] > 2:
            p.b_ptr = b.float()
        args = tuple(getattr(p, s) for s in p.__slots__)
        kernel = k[(1,)]
        kernel(*args, num_warps=4)""")
    assert found == {**CHECKED, "b_ptr": (*HALF, "float32")}
    nested = launched(tmp_path / "nested", """\
        p = P(a, b, c)
        def dispatch(n, params):
            kernel = k[(n,)]
            kernel(*params.args())
        dispatch(1, p)""")
    assert nested == CHECKED


def test_what_is_not_known_stays_unknown(tmp_path: Path) -> None:
    for i, body in enumerate((
            "k[(1,)](*make(a, b, c))",                  # unpacks what is not a params object
            "p = P(a, b, c)\nfiddle(p)\nk[(1,)](*p.args())",  # the object is handed to a call that may change it
            "p = P(*make(a))\nk[(1,)](*p.args())",      # the constructor unpacks
            "run(k, a, b, c)",                          # the kernel handed on: its launch is not seen
            "kernel = k[(1,)]\nreturn kernel",          # the launcher handed on
            "k.run(a, b, c, grid=(1,))")):
        assert launched(tmp_path / str(i), body) == UNKNOWN, body
    unstored = PARAMS.replace('"c_ptr")', '"c_ptr", "d")')  # `d` is never stored
    rebound = PARAMS.replace("self.b_ptr = b_ptr", "b_ptr = b_ptr.float()\n        self.b_ptr = b_ptr")
    for i, other in enumerate((unstored, rebound)):
        assert launched(tmp_path / f"class{i}", "p = Q(a, b, c)\nk[(1,)](*p.args())",
                        imp="from .kern import k\n" + other.replace("class P", "class Q")) == UNKNOWN, other


def test_one_unchecked_launch_leaves_the_dtype_open(tmp_path: Path) -> None:
    found = launched(tmp_path, "k[(1,)](a, b, c)",
                     **{"pkg/loose.py": "from .kern import k\ndef g(x, y, z):\n    k[(1,)](x, y, z)\n"})
    assert found == {"a_ptr": ("?", *HALF), "b_ptr": ("?", *HALF), "c_ptr": ("?", "float32")}


def test_what_is_not_a_launch_of_the_kernel(tmp_path: Path) -> None:
    for i, text in enumerate(("from .other import k\nk[(1,)](x, y, z)\n",  # another module's kernel of that name
                              "k[(1,)](x, y, z)\n",                          # no import
                              "from .kern import k\ndef f(k):\n    k[(1,)](x, y, z)\n",  # a parameter named k
                              "from .kern import k\nv = [k for k in range(3)]\n")):  # a comprehension's k
        files = {"pkg/kern.py": KERN, "pkg/other.py": KERN, "pkg/api.py": text}
        assert "k" not in passed(files, tmp_path / str(i)), text


def test_a_kernel_its_own_module_launches_is_left_to_it(tmp_path: Path) -> None:
    kern = KERN + "\ndef fwd(a, b, c):\n    k[(1,)](a, b, c)\n"
    files = {"pkg/kern.py": kern, "pkg/api.py": API.format(imp="from .kern import k", body="    k[(1,)](a, b, c)")}
    assert "k" not in passed(files, tmp_path)


def test_the_kernels_module_reads_what_the_launches_pass(tmp_path: Path) -> None:
    """dtype_flow.py's pointer: a kernel launched only elsewhere takes what the index hands it."""
    from kanalyze.analyzer.project_index import Linked
    from kanalyze.analyzer.triton.dtype_flow import DtypeFlow
    from kanalyze.analyzer.triton.model import TritonModule

    for linked, expected in ((Linked((), (("k", (("a_ptr", HALF),)),)), set(HALF)),
                             (Linked((), (("k", (("a_ptr", ()),)),)), {"?"}), (None, {"?"})):
        model = TritonModule.from_source("kern.py", KERN, settings={"linked": linked} if linked else None)
        jit = model.jit["k"]
        load = next(c for c in model.calls if c.qualname == "triton.language.load" and c.function is jit.function)
        assert DtypeFlow(model).pointer_element(jit.function, load.node.args[0].value) == expected
