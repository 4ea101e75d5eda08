"""Findings inside kernels that only never-run code launches (kanalyze/analyzer/never_run.py).

The fixture package fixtures/triton/never_run/ is checked here as a tree; the fixture test
(test_fixtures.py) checks each of its files alone, where every dot is reported.  Its
`# tree ok:` / `# tree expect:` lines say what the tree check gives.  The rest holds each
conservative rule: where unsure, the kernel may run and its findings stay.
"""

from __future__ import annotations

from pathlib import Path

from test_project_index import by_row, check_tree, config_for, linked_in

from kanalyze.analyzer.project_index import Linked, ProjectIndex
from kanalyze.check import run_static

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "fixtures" / "triton" / "never_run"
NEVER_RUN = ("_grad_block", "_scores_bwd_kernel", "_scores_fwd_kernel")


def test_the_package_checked_as_a_tree_meets_its_tree_expectations() -> None:
    result, checked = check_tree(PACKAGE)
    assert checked >= 3
    assert [(f.location.row, f.kernel) for f in result.findings if f.code == "PRC001"] == [(47, "matmul_kernel")]


def test_checked_alone_every_dot_is_reported() -> None:
    kernels = PACKAGE / "kernels.py"
    alone = by_row(run_static([str(kernels)], config_for(kernels), use_cache=False, jobs=1).findings, kernels)
    assert sorted(row for row, code in alone if code == "PRC001") == [17, 25, 47]


def test_the_index_names_the_never_run_kernels_of_the_fixture() -> None:
    files = {str(p): p.read_text(encoding="utf-8") for p in sorted(PACKAGE.glob("*.py"))}
    index = ProjectIndex.build(files)
    assert index.linked(str(PACKAGE / "kernels.py")).never_run == NEVER_RUN
    assert index.linked(str(PACKAGE / "layer.py")).never_run == ()


# ------------------------------------------------------------------ the rules, one by one

KERNELS = """\
import torch
import triton
import triton.language as tl

@triton.jit
def _fwd_kernel(a_ptr, c_ptr):
    tl.store(c_ptr, tl.dot(tl.load(a_ptr), tl.load(a_ptr)))

@triton.jit
def mm_kernel(a_ptr, c_ptr):
    tl.store(c_ptr, tl.dot(tl.load(a_ptr), tl.load(a_ptr)))

class _Fn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a):
        c = torch.empty_like(a)
        _fwd_kernel[(1,)](a, c)
        return c

def _launch_mm(a):
    c = torch.empty_like(a)
    mm_kernel[(1,)](a, c)
    return c
"""

LAYER = """\
from torch import nn
from .kern import _Fn, _launch_mm

class Layer(nn.Module):
    def __init__(self, dim):
        {init}
        super().__init__()

    def forward(self, a):
        return _Fn.apply(_launch_mm(a))
"""

RAISES = 'raise RuntimeError("deprecated")'


def never_run(files: dict[str, str], tmp_path: Path, module: str = "pkg/kern.py") -> tuple[str, ...]:
    """What the index hands `module` as its never-run kernels."""
    return linked_in(files, tmp_path, module).never_run


def package(init: str = RAISES, kernels: str = KERNELS, **more: str) -> dict[str, str]:
    return {"pkg/__init__.py": "from .layer import Layer\n", "pkg/kern.py": kernels,
            "pkg/layer.py": LAYER.format(init=init), **more}


def test_a_raising_init_makes_what_only_the_layer_uses_never_run(tmp_path: Path) -> None:
    # `_fwd_kernel` through the private `_Fn`; `mm_kernel`, a public name, through `_launch_mm`
    assert never_run(package(), tmp_path) == ("_fwd_kernel", "mm_kernel")


def test_a_docstring_before_the_raise_and_calls_of_the_class_change_nothing(tmp_path: Path) -> None:
    init = '"""Deprecated."""\n        ' + RAISES
    user = "from .layer import Layer\n\ndef make(dim):\n    try:\n        return Layer(dim)\n" \
           "    except RuntimeError:\n        return isinstance(dim, Layer)\n"
    assert never_run(package(init, **{"pkg/user.py": user}), tmp_path) == ("_fwd_kernel", "mm_kernel")


def test_the_use_is_found_through_a_module_attribute(tmp_path: Path) -> None:
    for header, spelled in (("from . import kern", "kern."), ("import pkg.kern", "pkg.kern."),
                            ("import pkg.kern as K", "K.")):
        files = package()
        files["pkg/layer.py"] = files["pkg/layer.py"].replace("from .kern import _Fn, _launch_mm", header) \
            .replace("_Fn.apply(_launch_mm(a))", f"{spelled}_Fn.apply({spelled}_launch_mm(a))")
        assert never_run(files, tmp_path / spelled) == ("_fwd_kernel", "mm_kernel"), header


def test_a_raise_under_an_if_may_not_run(tmp_path: Path) -> None:
    assert never_run(package("if dim < 0:\n            " + RAISES), tmp_path) == ()


def test_a_statement_before_the_raise_is_not_the_shape(tmp_path: Path) -> None:
    assert never_run(package("self.dim = dim\n        " + RAISES), tmp_path) == ()


def test_a_subclass_may_be_constructed(tmp_path: Path) -> None:
    for name, base in (("Sub", "Layer"), ("Sub", "layer.Layer"), ("Layer", "layer.Layer")):
        sub = f"from . import layer\nfrom .layer import Layer\n\nclass {name}({base}):\n" \
              "    def __init__(self):\n        pass\n"
        assert never_run(package(**{"pkg/sub.py": sub}), tmp_path / name / base) == ()


def test_a_base_named_like_the_class_is_not_the_class(tmp_path: Path) -> None:
    files = package()  # `class Module(nn.Module)`: the base is torch's, bound before the class
    files["pkg/layer.py"] = files["pkg/layer.py"].replace("class Layer(nn.Module)", "class Module(nn.Module)")
    files["pkg/__init__.py"] = "from .layer import Module\n"
    assert never_run(files, tmp_path) == ("_fwd_kernel", "mm_kernel")


def test_a_method_read_from_the_class_may_run(tmp_path: Path) -> None:
    user = "from .layer import Layer\n\ndef run(obj, a):\n    return Layer.forward(obj, a)\n"
    assert never_run(package(**{"pkg/user.py": user}), tmp_path) == ()


def test_an_alternative_constructor_may_construct(tmp_path: Path) -> None:
    layer = LAYER.format(init=RAISES) + "\n    @classmethod\n    def make(cls):\n        return cls.__new__(cls)\n"
    files = package()
    files["pkg/layer.py"] = layer
    assert never_run(files, tmp_path) == ()


def test_a_public_class_between_may_be_used_from_outside(tmp_path: Path) -> None:
    kernels = KERNELS.replace("_Fn", "Fn").replace("def _launch_mm", "def launch_mm")
    files = package(kernels=kernels)
    files["pkg/layer.py"] = files["pkg/layer.py"].replace("_Fn", "Fn").replace("_launch_mm", "launch_mm")
    # the kernels' only users are public: outside code may call them
    assert never_run(files, tmp_path) == ()


def test_a_second_use_outside_never_run_code_may_run(tmp_path: Path) -> None:
    user = "from .kern import _Fn\n\ndef scores(a):\n    return _Fn.apply(a)\n"
    assert never_run(package(**{"pkg/user.py": user}), tmp_path) == ("mm_kernel",)
    aliased = "from .kern import _Fn as F\n\ndef scores(a):\n    return F.apply(a)\n"
    assert never_run(package(**{"pkg/user.py": aliased}), tmp_path / "alias") == ("mm_kernel",)
    module = "from . import kern\n\ndef scores(a):\n    return kern._launch_mm(a)\n"
    assert never_run(package(**{"pkg/user.py": module}), tmp_path / "module") == ("_fwd_kernel",)


def test_a_re_export_or_an_all_entry_may_be_used_from_outside(tmp_path: Path) -> None:
    files = package()
    files["pkg/__init__.py"] += "from .kern import _Fn\n"
    assert never_run(files, tmp_path) == ("mm_kernel",)
    files = package(kernels=KERNELS + '\n__all__ = ["_launch_mm"]\n')
    assert never_run(files, tmp_path / "all") == ("_fwd_kernel",)


def test_without_the_layer_in_the_check_nothing_is_concluded(tmp_path: Path) -> None:
    files = package()
    del files["pkg/layer.py"]
    assert never_run(files, tmp_path) == ()
    assert never_run({"pkg/kern.py": KERNELS, "pkg/other.py": "x = 1\n"}, tmp_path / "kern") == ()


def test_the_never_run_kernels_are_part_of_the_cache_key(tmp_path: Path) -> None:
    assert Linked().key() != Linked(never_run=("_fwd_kernel",)).key()
    assert Linked(passed=(("f", ()),)).key() != Linked(passed=(("f", ()),), never_run=("k",)).key()
    assert Linked().key() == "[]"  # unchanged for a file the new field says nothing of
    files = package()
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    linked = ProjectIndex.build({str(tmp_path / n): t for n, t in files.items()}).linked(str(tmp_path / "pkg/kern.py"))
    assert linked.never_run and linked.key() != Linked(linked.users, linked.passed).key()
