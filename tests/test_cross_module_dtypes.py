"""PRC001 across modules (kanalyze/analyzer/triton/cross_callers.py): a kernel launcher's
parameters take what every call of it in the other checked modules passes.

The fixture package fixtures/triton/cross_module_dtypes/ is checked here as a tree; the
fixture test (test_fixtures.py) checks each of its files alone, where both dots are
reported.  Its `# tree ok:` / `# tree expect:` lines say what the tree check gives.
"""

from __future__ import annotations

from pathlib import Path

from test_project_index import by_row, check_tree, config_for, linked_in

from kanalyze.check import run_static

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "fixtures" / "triton" / "cross_module_dtypes"


def test_the_package_checked_as_a_tree_meets_its_tree_expectations() -> None:
    result, checked = check_tree(PACKAGE)
    assert checked >= 2


def test_checked_alone_both_dots_are_reported() -> None:
    kernels = PACKAGE / "kernels.py"
    alone = by_row(run_static([str(kernels)], config_for(kernels), use_cache=False, jobs=1).findings, kernels)
    assert sorted(row for row, code in alone if code == "PRC001") == [16, 34]


def passed(files: dict[str, str], tmp_path: Path, module: str = "pkg/kern.py") -> tuple:
    return linked_in(files, tmp_path, module).passed


KERN = """\
import triton
import triton.language as tl

@triton.jit
def k(a_ptr, b_ptr, c_ptr):
    tl.store(c_ptr, tl.dot(tl.load(a_ptr), tl.load(b_ptr)))

def fwd(a, b, out=None, scale=1.0):
    k[(1,)](a, b, out)
"""

CHECKED = "import torch\n{imp}\ndef api(a, b):\n    assert a.dtype == torch.float16 and b.dtype == torch.float16\n" \
          "    return {call}\n"


def test_each_import_form_carries_the_callers_dtypes(tmp_path: Path) -> None:
    for imp, call in (("from .kern import fwd", "fwd(a, b)"), ("from .kern import fwd as f", "f(a, b=b)"),
                      ("from . import kern as K", "K.fwd(a, b)"), ("import pkg.kern", "pkg.kern.fwd(a, b)"),
                      ("from pkg import fwd", "fwd(a, b)")):
        found = passed({"pkg/__init__.py": "from .kern import fwd\n", "pkg/kern.py": KERN,
                        "pkg/api.py": CHECKED.format(imp=imp, call=call)}, tmp_path / imp.replace(" ", "_"))
        assert found == (("fwd", (("a", ("float16",)), ("b", ("float16",)), ("scale", ("?",)))),), imp


def test_what_is_not_a_call_of_the_launcher(tmp_path: Path) -> None:
    for text in ("from .other import fwd\nfwd(x, y)\n",          # another module's function of that name
                 "fwd(x, y)\n",                                   # no import
                 "from .kern import fwd\nif False:\n    pass\n"):  # imported, never called
        assert passed({"pkg/kern.py": KERN, "pkg/other.py": "def fwd(a, b):\n    return a\n", "pkg/api.py": text},
                      tmp_path / str(abs(hash(text)))) == ()


def test_an_unchecked_call_or_an_unpacked_one_leaves_the_dtype_unknown(tmp_path: Path) -> None:
    found = passed({"pkg/kern.py": KERN, "pkg/api.py": CHECKED.format(imp="from .kern import fwd", call="fwd(a, b)"),
                    "pkg/loose.py": "from .kern import fwd\ndef g(*args):\n    return fwd(*args)\n"}, tmp_path)
    assert dict(found[0][1])["a"] == ("?", "float16")


def test_a_launcher_defined_twice_is_not_followed(tmp_path: Path) -> None:
    kern = KERN + "\ndef fwd(a, b):\n    k[(1,)](a, b, a)\n"
    assert passed({"pkg/kern.py": kern, "pkg/api.py": CHECKED.format(imp="from .kern import fwd",
                                                                      call="fwd(a, b)")}, tmp_path) == ()


def test_what_the_callers_pass_keys_the_cache() -> None:
    from kanalyze.analyzer.project_index import Linked

    plain = Linked((("k", ("a.py",)),))
    with_passed = Linked((("k", ("a.py",)),), (("fwd", (("q", ("float16",)),)),))
    assert plain.key() != with_passed.key()
    assert with_passed.passed_to("fwd", "q") == {"float16"}
    assert with_passed.passed_to("fwd", "other") == frozenset() and with_passed.passed_to("bwd", "q") is None


def test_a_check_that_does_not_select_prc001_skips_the_callers_step(monkeypatch) -> None:
    """Only PRC001 reads what other modules pass to a launcher, and that step is the index's
    costliest (fla's tree: 8 s of the index's 8.5 s): a check without PRC001 never runs it."""
    from kanalyze.analyzer import project_index
    from kanalyze.config import load_config

    def refuse(*args, **kwargs):
        raise AssertionError("the callers' step ran for a check that does not select PRC001")

    monkeypatch.setattr(project_index, "passed_to_launchers", refuse)
    monkeypatch.setattr(project_index, "passed_to_kernels", refuse)  # the kernels' launches: the same
    config = load_config([str(PACKAGE)], isolated=True, select=["ORD001", "RES001"])
    result = run_static([str(PACKAGE)], config, use_cache=False, jobs=1)
    assert not [f for f in result.findings if f.code.startswith("KAN")], result.findings
    monkeypatch.undo()
    assert run_static([str(PACKAGE)], config_for(PACKAGE), use_cache=False, jobs=1).findings
