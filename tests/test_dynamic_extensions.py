"""The shared build cache for candidates' torch extensions (extensions.py), on the CPU.

CUDA C++ candidates need a GPU, but the cache does not: the same wrapper routes
`cpp_extension.load` and `load_inline`.  Here tiny plain C++ libraries (no torch
headers, so each build takes a second) are built through `load`, with the real
ninja and C++ compiler, in this process and in a fresh one.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kanalyze.dynamic.sandbox import extensions  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not (shutil.which("ninja") and shutil.which("c++")),
                                reason="needs ninja and a C++ compiler")


def _answer_source(folder: Path, value: int) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "answer.cpp"
    path.write_text(f'extern "C" int answer() {{ return {value}; }}\n')
    return str(path)


def _load(source: str):
    from torch.utils import cpp_extension

    return cpp_extension.load(name="custom_op", sources=[source], is_python_module=False)


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(extensions.ROOT_VARIABLE, str(tmp_path / "cache"))
    extensions.install()
    return tmp_path / "cache"


def test_same_name_other_source_gets_its_own_build(cache, tmp_path) -> None:
    first = _load(_answer_source(tmp_path / "a", 41))
    second = _load(_answer_source(tmp_path / "b", 42))
    assert os.path.dirname(first) != os.path.dirname(second)
    assert ctypes.CDLL(first).answer() == 41 and ctypes.CDLL(second).answer() == 42
    assert sorted(p.name.rsplit("-", 1)[0] for p in cache.iterdir()) == ["custom_op", "custom_op"]
    # Same source again (another file with the same text is another source: torch names files).
    again = _load(str(tmp_path / "a" / "answer.cpp"))
    assert again == first and ctypes.CDLL(again).answer() == 41


def test_a_built_source_is_not_compiled_again_in_another_process(cache, tmp_path) -> None:
    source = _answer_source(tmp_path / "a", 7)
    library = _load(source)
    built_at = os.stat(library).st_mtime_ns
    code = ("import sys; from kanalyze.dynamic.sandbox import extensions; extensions.install(); "
            "from torch.utils import cpp_extension; "
            f"print(cpp_extension.load(name='custom_op', sources=[{source!r}], is_python_module=False))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**os.environ, extensions.ROOT_VARIABLE: str(cache)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == library
    assert os.stat(library).st_mtime_ns == built_at


def test_a_killed_build_is_started_over(cache, tmp_path) -> None:
    source = _answer_source(tmp_path / "a", 5)
    library = Path(_load(source))
    directory = library.parent
    # What a worker killed half-way leaves: torch's lock file, a truncated library, no completion mark.
    (directory / "kanalyze-complete").unlink()
    (directory / "lock").write_text("")
    library.unlink()                      # a new file: this process has the old one mapped
    library.write_bytes(b"\x7fELF truncated")
    rebuilt = Path(_load(source))
    assert rebuilt == library and library.stat().st_size > 1000          # compiled again, not the stub
    assert (directory / "kanalyze-complete").exists() and not (directory / "lock").exists()


def test_calls_into_a_built_module_are_counted(cache, tmp_path) -> None:
    """ORD001's reversed run must show that the candidate's CUDA C++ ran: each function of a
    module built through the cache counts its calls (`extensions.CALLS`), once it returned."""
    from torch.utils import cpp_extension

    cpp = tmp_path / "twice.cpp"   # a bare CPython module: no torch headers, built in a second
    cpp.write_text(
        "#include <Python.h>\n"
        "static PyObject* twice(PyObject* self, PyObject* arg) { return PyNumber_Add(arg, arg); }\n"
        "static PyMethodDef methods[] = {{\"twice\", twice, METH_O, \"\"}, {NULL, NULL, 0, NULL}};\n"
        "static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, \"counted_op\", NULL, -1, methods};\n"
        "PyMODINIT_FUNC PyInit_counted_op(void) { return PyModule_Create(&module); }\n")
    built = cpp_extension.load(name="counted_op", sources=[str(cpp)], is_python_module=True)
    extensions.CALLS.clear()
    assert built.twice(21) == 42 and built.twice("a") == "aa"
    assert extensions.CALLS == {"counted_op.twice": 2}
    with pytest.raises(TypeError):   # a call that raised did no work: not counted
        built.twice(None)
    assert extensions.CALLS == {"counted_op.twice": 2}
    extensions.CALLS.clear()
    assert extensions.calls()["counted_op.twice"] == 0   # known, not called since


def test_aten_work_inside_an_extension_is_recorded_for_res001(tmp_path) -> None:
    """A "kernel" whose C++ calls `torch::matmul` reaches no torch function mode; while a run
    records the candidate's calls, a dispatch recorder around each extension call counts the ATen
    ops its C++ dispatches (recording.extension_recorder), beside the calls themselves.  A worker's
    Environment, in a fresh interpreter (its wrappers are process-wide); nothing needs a device."""
    import json
    import textwrap

    program = textwrap.dedent('''
        import json, torch
        from kanalyze.dynamic.environment import Environment
        from kanalyze.dynamic.sandbox import extensions
        environment = Environment("cuda")
        extensions.install()
        from torch.utils.cpp_extension import load_inline
        ext = load_inline(name="res_probe", functions=["via_aten", "own_loop"], cpp_sources="""
            #include <torch/extension.h>
            torch::Tensor via_aten(torch::Tensor a, torch::Tensor b) { return torch::matmul(a, b).relu(); }
            torch::Tensor own_loop(torch::Tensor a) {
                auto out = torch::empty_like(a);
                auto p = a.data_ptr<float>(); auto q = out.data_ptr<float>();
                for (int64_t i = 0; i < a.numel(); ++i) q[i] = p[i] > 0 ? p[i] : 0;
                return out;
            }""")
        a = torch.randn(4, 4)
        environment.before_run({}, {}, [])
        with environment.recording(True, nonce=7):   # sealed: the dispatch recorder tampers with nothing
            ext.via_aten(a, a)
            ext.own_loop(a)
            ext.own_loop(a)
        seen = environment.after_run({})
        environment.before_run({}, {}, [])
        with environment.recording(False):   # a run that records no calls: counted, not looked into
            ext.own_loop(a)
        print(json.dumps([seen["extension_calls"], seen["extension_ops"], environment.after_run({}), seen["seal"]]))
    ''')
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={**os.environ, extensions.ROOT_VARIABLE: str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-3000:]
    calls, inside, quiet, seal = json.loads(done.stdout.strip().splitlines()[-1])
    assert calls == {"res_probe.via_aten": 1, "res_probe.own_loop": 2}
    assert inside.get("mm") == 1 and inside.get("relu") == 1 and inside.get("empty_like") == 2, inside
    assert quiet["extension_calls"] == {"res_probe.own_loop": 1, "res_probe.via_aten": 0}   # (0: not called)
    assert "extension_ops" not in quiet
    assert seal == {"canaries": [7], "tampered": []}
