"""The CUDA static pass: inline sources and their positions, the kernel model,
suppressions, the pipeline (discovery, cache, outputs) and bad input."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import jsonschema
import pytest

from kanalyze.analyzer.cuda.fold import decode_escapes
from kanalyze.analyzer.cuda.inline import find_extensions
from kanalyze.analyzer.cuda.model import CudaModule
from kanalyze.analyzer.cuda.sources import CudaUnit
from kanalyze.analyzer.cuda.types import possible_bases, type_of
from kanalyze.analyzer.triton.model import TritonModule
from kanalyze.check import analyze_source, run_static
from kanalyze.cli import main
from kanalyze.config import Config

ROOT = Path(__file__).resolve().parent.parent
SARIF_SCHEMA = json.loads((ROOT / "tests" / "data" / "sarif-schema-2.1.0.json").read_text())

ATOMIC_KERNEL = "__global__ void total(const float* x, float* out, int n) { atomicAdd(out, x[0]); }"


def codes(path: str, text: str) -> list[tuple[int, int, str]]:
    findings, _ = analyze_source(path, text)
    return [(f.location.row, f.location.column, f.code) for f in findings]


def where(text: str, needle: str, nth: int = 0) -> tuple[int, int]:
    """1-based (row, column) of the nth occurrence of `needle` in `text`."""
    offset = -1
    for _ in range(nth + 1):
        offset = text.index(needle, offset + 1)
    row = text.count("\n", 0, offset) + 1
    return row, offset - (text.rfind("\n", 0, offset) + 1) + 1


# --- reading strings out of Python -------------------------------------------------

@pytest.mark.parametrize("literal", [
    r'"plain"', r'"tab\there"', r'"\\n stays"', r'"\x41\u00e9\N{GREEK SMALL LETTER ALPHA}"', r'"\101\7"',
    r'"unknown \q escape"', '"""line\\\ncontinued"""', r'"quote \" and \'"',
])
def test_decoded_literals_equal_python_and_map_each_character(literal: str) -> None:
    body = literal.strip('"')
    text, offsets = decode_escapes(body)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # `\q`: Python keeps the backslash, and warns
        assert text == ast.literal_eval(literal)
    if offsets is not None:
        assert len(offsets) == len(text) and offsets == sorted(offsets)
        for char, offset in zip(text, offsets):
            assert body[offset] == char or body[offset] == "\\"


def test_inline_finding_lands_on_the_python_row_and_column_through_escapes() -> None:
    source = textwrap.dedent('''\
        from torch.utils.cpp_extension import load_inline
        LAUNCH_K = "\\nvoid run_k(float* o, const float* x) { k<<<1, 1>>>(o, x); }"
        src = "__global__ void k(float* o, const float* x) {\\n\\t\\tatomicAdd(o, x[0]);\\n}" + LAUNCH_K
        ext = load_inline(name="e", cpp_sources="", cuda_sources=src, functions=[])
        ''')
    assert [(r, c) for r, c, code in codes("mod.py", source) if code == "ORD001"] == [where(source, "atomicAdd")]


def test_fstring_concatenation_and_format_fold_with_exact_positions() -> None:
    source = textwrap.dedent('''\
        from torch.utils.cpp_extension import load_inline
        N = 4
        LAUNCH_K = "\\nvoid run_k(float* o, const float* x) { k<<<1, 1>>>(o, x); }"
        LAUNCH_G = "\\nvoid run_g(float* o) { g<<<1, 1>>>(o); }"
        head = "__global__ void k(float* o, const float* x) {"
        body = f"""
            float s[{N}];
            atomicAdd(o, x[0]);
        }}"""
        tail = "\\n__global__ void g(float* o) {{ atomicAdd(o, {v}); }}".format(v="1.0f")
        ext = load_inline(name="e", cpp_sources="", cuda_sources=head + body + tail + LAUNCH_K + LAUNCH_G)
        ''')
    host = TritonModule.from_source("mod.py", source)
    [ext] = find_extensions(host)
    [unit] = ext.units
    assert "float s[4];" in unit.text and "atomicAdd(o, 1.0f); }" in unit.text and not unit.skipped
    found = codes("mod.py", source)
    assert (*where(source, "atomicAdd"), "ORD001") in found
    assert (*where(source, "atomicAdd", 1), "ORD001") in found


def test_names_lists_and_accumulated_strings_are_folded_in_order() -> None:
    source = textwrap.dedent('''\
        import torch.utils.cpp_extension as cpp
        src = "// part one\\n"
        src += "__global__ void k(float* o) { atomicAdd(o, 1.0f); }\\n"
        decl = "void k_launch();"
        ext = cpp.load_inline("e", [decl], [src, "// part two"], functions={"k_launch": "doc"})
        ''')
    [ext] = find_extensions(TritonModule.from_source("mod.py", source))
    assert ext.name == "e" and ext.functions == ["k_launch"]
    cpp, cuda = ext.units
    assert cpp.language == "c++" and cpp.text == "void k_launch();"
    assert cuda.text.startswith("// part one\n__global__") and cuda.text.endswith("\n// part two")
    assert cuda.compile_text.startswith("#include <torch/types.h>")


def test_sources_assigned_in_branches_and_try_blocks_are_read() -> None:
    """A source assigned under `if torch.cuda.is_available():` at module level, or inside a
    `try` in `__init__`, and used in the same block: read, not a KAN000 "not a constant
    expression" (as two cuda-l1 solutions of the development corpus write it); so is
    `self.<name>` that the class assigns once (a third).  The last assignment before the use
    wins; one after it in another branch does not."""
    source = textwrap.dedent('''\
        import torch
        from torch.utils.cpp_extension import load_inline
        LAUNCH_K = "\\nvoid run_k(float* o) { k<<<1, 1>>>(o); }"
        if torch.cuda.is_available():
            src = "__global__ void k(float* o) { atomicAdd(o, 1.0f); }" + LAUNCH_K
            try:
                a = load_inline(name="a", cpp_sources="", cuda_sources=src)
            except Exception:
                a = None
        else:
            src = None
        class M:
            def __init__(self):
                try:
                    body = "__global__ void m(float* o, float v) { o[0] = fmaxf(v, 0.0f); } void r(float* o) { m<<<1, 1>>>(o, 1.0f); }"
                    if True: decl = "void m_launch();"
                    self.m = load_inline(name="m", cpp_sources=[decl], cuda_sources=[body])
                except Exception:
                    self.m = None
                self.kernel_source = "__global__ void s(float* o, float v) { o[0] = fminf(v, 6.0f); } void r(float* o) { s<<<1, 1>>>(o, 1.0f); }"
            def build(self):
                return load_inline(name="s", cpp_sources="", cuda_sources=self.kernel_source)
        ''')
    found = codes("mod.py", source)
    assert not [f for f in found if f[2] == "KAN000"], found
    assert (*where(source, "atomicAdd"), "ORD001") in found
    assert (*where(source, "fmaxf"), "EXC001") in found
    assert (*where(source, "fminf"), "EXC001") in found   # `self.kernel_source`, assigned once in `__init__`


def test_non_constant_sources_are_named_once_and_the_rest_is_read() -> None:
    source = textwrap.dedent('''\
        from torch.utils.cpp_extension import load_inline
        LAUNCH_K = "\\nvoid run_k(float* o) { k<<<1, 1>>>(o); }"
        tmpl = "__global__ void k(float* o) {{ float t[{n}]; atomicAdd(o, 1.0f); }}"
        a = load_inline(name="a", cpp_sources="", cuda_sources=tmpl.format(n=size()) + LAUNCH_K)
        b = load_inline(name="b", cpp_sources=read("b.cpp"))
        ''')
    found = codes("mod.py", source)
    assert (*where(source, "atomicAdd"), "ORD001") in found
    kan = [(r, c) for r, c, code in found if code == "KAN000"]
    assert kan == [where(source, "size()"), where(source, 'read("b.cpp")')]


def test_nothing_is_executed_to_get_a_string(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    source = textwrap.dedent(f'''\
        from torch.utils.cpp_extension import load_inline
        def make():
            open({str(marker)!r}, "w").write("x")
            return "__global__ void k() {{}}"
        ext = load_inline(name="e", cpp_sources="", cuda_sources=make())
        ''')
    [(_, _, code)] = codes("mod.py", source)
    assert code == "KAN000" and not marker.exists()


def test_cupy_raw_kernel_and_module() -> None:
    source = textwrap.dedent('''\
        import cupy
        k = cupy.RawKernel(r"""extern "C" __global__ void k(float* o) { atomicAdd(o, 1.0f); }""", "k")
        m = cupy.RawModule(code="extern \\"C\\" __global__ void g(int* o) { atomicAdd(o, 1); }")
        ''')
    extensions = find_extensions(TritonModule.from_source("mod.py", source))
    assert [e.builder for e in extensions] == ["RawKernel", "RawModule"] and extensions[0].functions == ["k"]
    assert codes("mod.py", source) == [(*where(source, "atomicAdd"), "ORD001")]


# --- the kernel model ------------------------------------------------------------

MODEL_SOURCE = textwrap.dedent('''\
    #include <cuda_fp16.h>
    #define TILE 16
    #define KERNEL(name, T) __global__ void name(const T* x, T* y, int n)
    KERNEL(copy_float, float) { int i = threadIdx.x; if (i < n) y[i] = x[i]; }
    __device__ float twice(float v) { return 2.0f * v; }
    template <typename T>
    __global__ void scale(const T* x, T* y, int n) {
        __shared__ float tile[TILE][TILE];
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        tile[threadIdx.y][threadIdx.x] = 0.0f;
        __syncthreads();
        if (i < n) y[i] = twice(x[i]);
    }
    void launch(const float* x, float* y, int n, cudaStream_t stream) {
        dim3 block(TILE, TILE);
        int grid = (n + 255) / 256;
        scale<float><<<grid, block, 0, stream>>>(x, y, n);
        scale<__half><<<grid, 256>>>(nullptr, nullptr, n);
    }
    ''')


def test_kernel_model_reads_macro_kernels_templates_launches_and_shared() -> None:
    model = CudaModule.parse(CudaUnit("m.cu", MODEL_SOURCE, "file"))
    assert set(model.kernels) == {"copy_float", "scale"} and model.kernels["copy_float"].macro == "KERNEL"
    assert [(p.name, p.ctype.base, p.ctype.pointers) for p in model.kernels["copy_float"].params] == [
        ("x", "float", 1), ("y", "float", 1), ("n", "int", 0)]
    assert set(model.device_functions) == {"twice"}
    scale = model.kernels["scale"]
    assert scale.template_params == ["T"]
    first, second = model.launches
    assert first.kernel is scale and first.host.name == "launch" and [model.text(c) for c in first.config] == [
        "grid", "block", "0", "stream"]
    assert model.dims(first.config[1], first.host) == [16, 16] and model.dims(second.config[1], second.host) == [256]
    [tile] = model.shared
    assert tile.name == "tile" and [model.int_value(d) for d in tile.dims] == [16, 16]
    assert [c.name for c in model.calls_named("__syncthreads")] == ["__syncthreads"]
    y = scale.variable("y")
    assert possible_bases(model, y.ctype.element, scale) == {"float", "half"}
    call = next(c for c in model.calls if c.name == "twice")
    assert type_of(model, call.node, scale).base == "float" and not model.errors


# --- suppressions ------------------------------------------------------------------

@pytest.mark.parametrize("comment,suppressed", [
    ("// NOLINT", True), ("// NOLINT(ORD001)", True), ("// NOLINT(ORD*)", True), ("// NOLINT(ord)", True),
    ("// NOLINT(PRC001)", False), ("// NOLINTNEXTLINE(ORD001)", False), ("", False),
])
def test_nolint_on_the_line(comment: str, suppressed: bool) -> None:
    source = f"__global__ void k(float* o) {{\n    atomicAdd(o, 1.0f); {comment}\n}}\n"
    findings, count = analyze_source("k.cu", source)
    assert (not findings, count) == ((True, 1) if suppressed else (False, 0))


def test_nolintnextline_begin_end_and_file_level() -> None:
    body = "__global__ void k(float* o) {\n%s}\n"
    assert analyze_source("k.cu", body % "    // NOLINTNEXTLINE(ORD001)\n    atomicAdd(o, 1.0f);\n")[0] == []
    block = "    // NOLINTBEGIN(ORD001)\n    atomicAdd(o, 1.0f);\n    // NOLINTEND(ORD001)\n    atomicAdd(o, 2.0f);\n"
    assert [f.location.row for f in analyze_source("k.cu", body % block)[0]] == [5]
    assert analyze_source("k.cu", "// kanalyze: noqa: ORD001\n" + body % "    atomicAdd(o, 1.0f);\n")[0] == []
    assert analyze_source("k.cu", "// kanalyze: noqa: PRC\n" + body % "    atomicAdd(o, 1.0f);\n")[0] != []


def test_noqa_and_nolint_in_python_files() -> None:
    head = "from torch.utils.cpp_extension import load_inline\n"
    launched = ATOMIC_KERNEL + " void run(const float* x, float* out, int n) { total<<<1, 1>>>(x, out, n); }"
    one_line = head + f'ext = load_inline("e", "", "{launched}")  # noqa: ORD001\n'
    assert analyze_source("m.py", one_line) == ([], 1)
    multi = head + 'ext = load_inline("e", "", """\n' + launched.replace("; }", ";  // NOLINT(ORD001)\n}", 1) + '""")\n'
    assert analyze_source("m.py", multi) == ([], 1)
    # A kernel nothing launches: RES001 says so, and nothing is said of what it would do (ORD001).
    unlaunched = head + f'ext = load_inline("e", "", "{ATOMIC_KERNEL}")  # noqa: RES001\n'
    assert analyze_source("m.py", unlaunched) == ([], 1)


# --- the pipeline and the outputs ----------------------------------------------------

@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KANALYZE_CACHE_DIR", str(tmp_path / ".cache"))
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "sum.cu").write_text(ATOMIC_KERNEL + "\n")
    (tmp_path / "kernels" / "helpers.cuh").write_text("__device__ void add(double* o, double v) { atomicAdd(o, v); }\n")
    (tmp_path / "kernels" / "notes.txt").write_text(ATOMIC_KERNEL)
    (tmp_path / "model.py").write_text(INLINE_MODEL)
    return tmp_path


INLINE_MODEL = textwrap.dedent('''\
    import torch
    from torch.utils.cpp_extension import load_inline

    source = """
    __global__ void total(const float* x, float* out, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) atomicAdd(out, x[i]);
    }
    torch::Tensor total_cuda(torch::Tensor x) {
        auto out = torch::zeros({1}, x.options());
        int n = x.numel();
        total<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
        return out;
    }
    """
    ext = load_inline(name="total", cpp_sources="torch::Tensor total_cuda(torch::Tensor x);",
                      cuda_sources=source, functions=["total_cuda"], extra_cuda_cflags=["--use_fast_math"])


    class ModelNew(torch.nn.Module):
        def forward(self, x):
            return ext.total_cuda(x)
    ''')


def test_directory_walk_finds_cuda_files_and_the_cache_covers_them(project: Path) -> None:
    config = Config(root=str(project))
    cold = run_static(["."], config)
    assert sorted({Path(f.location.file).name for f in cold.findings}) == ["helpers.cuh", "model.py", "sum.cu"]
    warm = run_static(["."], config)
    assert warm.files_parsed == 0 and warm.files_from_cache == cold.files_parsed == 3
    assert [f.to_dict() for f in warm.findings] == [f.to_dict() for f in cold.findings]
    (project / "kernels" / "sum.cu").write_text("__global__ void total(int* o) { atomicAdd(o, 1); }\n")
    edited = run_static(["."], config)
    assert edited.files_parsed == 1 and "sum.cu" not in {Path(f.location.file).name for f in edited.findings}


def test_outputs_put_inline_findings_on_the_python_lines(project: Path, capsys) -> None:
    row, column = where(INLINE_MODEL, "atomicAdd")
    flag_row, flag_column = where(INLINE_MODEL, '"--use_fast_math"')
    assert main(["check", "model.py", "--no-cache"]) == 1
    text = capsys.readouterr().out
    assert f"model.py:{row}:{column}: ORD001" in text and f"model.py:{flag_row}:{flag_column}: EXC002" in text

    assert main(["check", "model.py", "--no-cache", "--output-format", "json"]) == 1
    items = json.loads(capsys.readouterr().out)
    ord001 = next(i for i in items if i["code"] == "ORD001")
    assert ord001["location"] == {"row": row, "column": column} and ord001["kernel"] == "total"
    assert ord001["end_location"] == {"row": row, "column": column + len("atomicAdd(out, x[i])")}

    assert main(["check", "model.py", "--no-cache", "--output-format", "sarif"]) == 1
    log = json.loads(capsys.readouterr().out)
    jsonschema.validate(log, SARIF_SCHEMA)
    regions = {r["ruleId"]: r["locations"][0]["physicalLocation"]["region"] for r in log["runs"][0]["results"]}
    assert (regions["ORD001"]["startLine"], regions["ORD001"]["startColumn"]) == (row, column)


def test_cuda_files_named_by_load_sources_are_checked(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "sum.cu").write_text(ATOMIC_KERNEL + "\n")
    (tmp_path / "build.py").write_text(textwrap.dedent('''\
        import os
        from torch.utils.cpp_extension import load
        ext = load(name="sum", sources=[os.path.join(os.path.dirname(__file__), "csrc", "sum.cu")])
        '''))
    result = run_static(["build.py"], Config(root=str(tmp_path)), use_cache=False)
    assert [(Path(f.location.file).name, f.code) for f in result.findings] == [("sum.cu", "ORD001")]


def test_rules_are_listed_once_and_explain_shows_the_cuda_detectors(capsys) -> None:
    from kanalyze.rules import all_rules, cuda_rules

    codes_listed = [r.code for r in all_rules()]
    assert len(codes_listed) == len(set(codes_listed))
    cuda_codes = {r.code for r in cuda_rules()}
    assert cuda_codes == {"CMP003", "EXC001", "EXC002", "INT001", "MEM001", "ORD001", "ORD002", "PRC001", "PRC002",
                          "RES001"}
    assert main(["rules"]) == 0
    listing = {line.split()[0]: line.split()[2] for line in capsys.readouterr().out.splitlines()}
    assert listing["ORD002"] == listing["EXC002"] == "static+gate"
    assert main(["explain", "ORD002"]) == 0
    assert "## In CUDA C++" in capsys.readouterr().out


def test_cuda_rule_examples() -> None:
    from kanalyze.rules import cuda_rules

    for rule in cuda_rules():
        assert rule.VALID and rule.INVALID and rule.docs and rule.name and rule.gate
        for example in rule.VALID:
            assert rule.code not in [f.code for f in analyze_source("example.cu", example)[0]], (rule.code, example)
        for example in rule.INVALID:
            found = [f.code for f in analyze_source("example.cu", example)[0]]
            assert rule.code in found and "KAN000" not in found, (rule.code, example)


def test_an_unsaved_editor_buffer_can_be_read_as_cuda() -> None:
    assert [f.code for f in analyze_source("untitled:1", ATOMIC_KERNEL, language="cuda")[0]] == ["ORD001"]
    assert analyze_source("untitled:1", ATOMIC_KERNEL)[0] == []  # not Python with a kernel either


def test_the_cuda_pass_imports_neither_torch_nor_triton() -> None:
    code = ("import sys; from kanalyze.check import analyze_source; "
            f"analyze_source('k.cu', {ATOMIC_KERNEL!r}); analyze_source('m.py', {INLINE_MODEL!r}); "
            "assert 'torch' not in sys.modules and 'triton' not in sys.modules, 'imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


# --- bad input -------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "__global__ void k(float* x { atomicAdd(x, 1.0f); ",           # unbalanced
    "}}}} ))) <<<>>> template < < < #define",                        # not C++ at all
    "__global__ void k(float* o) {\n    FOR_EACH(i, n) { atomicAdd(o, 1.0f); }\n}\n" * 50,
    "\ufeff__global__ void k() {} // é ∑ 😀\n",
    "x" * 100_000,
    "{" * 5000 + "}" * 5000,
])
def test_bad_cuda_gives_a_result_not_a_traceback(text: str) -> None:
    findings, _ = analyze_source("bad.cu", text)
    assert all(f.code in ("KAN000", "ORD001", "RES001") for f in findings)


def test_unparsable_regions_become_one_kan000_and_the_rest_is_read() -> None:
    text = "__global__ void a(float* o) { atomicAdd(o, 1.0f); }\n@@@ garbage $$$\n__global__ void b(int* o) { }\n"
    found = codes("k.cu", text)
    assert (1, 31, "ORD001") in found
    kan = [f for f in analyze_source("k.cu", text)[0] if f.code == "KAN000"]
    assert len(kan) == 1 and kan[0].location.row == 2 and "could not parse lines 2-3" in kan[0].message


def test_unreadable_cuda_files_are_kan000(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "latin.cu").write_bytes(b"// caf\xe9\n__global__ void k() {}\n")
    (tmp_path / "empty.cu").write_text("")
    result = run_static(["latin.cu", "empty.cu"], Config(root=str(tmp_path)), use_cache=False)
    assert sorted((Path(f.location.file).name, f.code) for f in result.findings) == [
        ("empty.cu", "KAN000"), ("latin.cu", "KAN000")]


def test_python_that_does_not_parse_is_reported_once() -> None:
    text = "import triton\nfrom torch.utils.cpp_extension import load_inline\n@triton.jit\ndef k(x\n"
    assert [f.code for f in analyze_source("m.py", text)[0]] == ["KAN000"]
    assert [f.code for f in analyze_source("m.py", text.replace("import triton\n", ""))[0]] == ["KAN000"]


def test_a_fixed_size_names_the_knob_its_name_names() -> None:
    """CMP003's `#define IN_CHANNELS 3` in a problem where `in_channels` and `kernel_size` are
    both 3 names `in_channels` (cuda-l1's level2_57 was told `kernel_size`)."""
    from kanalyze.rules.cmp003_shape_specialized_cuda import _same_knob

    assert _same_knob("IN_CHANNELS", ["in_channels", "kernel_size"]) == "in_channels"
    assert _same_knob("KSIZE", ["in_channels", "kernel_size"]) == "kernel_size"   # no name matches: the last
    assert _same_knob("N", ["in_channels", "batch_size"]) == "batch_size"   # `N` names neither
    assert _same_knob("N", []) is None
