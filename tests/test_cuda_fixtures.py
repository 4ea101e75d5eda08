"""CUDA fixtures: findings match their inline `// expect:` / `# expect:` lines exactly,
every CUDA detector has a flagged case and a clean look-alike, and every fixture
compiles with the real nvcc where one is installed.

What is compiled, honestly:
  - `.cu` files that do not use torch: `nvcc -arch=sm_90 -c`, each on its own;
  - `.cu` files that use torch, and the CUDA and C++ strings that Python fixtures hand
    to `load_inline`, exactly as kanalyze read them (with load_inline's own includes):
    one translation unit, each fixture in a namespace of its own, compiled with
    `nvcc -arch=sm_90 -ptx` against the installed torch's headers (a `.format` field
    kanalyze could not fold is defined as 256, the value the fixture's call returns).  `-ptx` runs the
    CUDA front end over all host and device code and generates PTX for the device
    code; it does not run the host compiler (that would take minutes for torch's
    headers), so host code is checked by the front end only;
  - cupy `RawKernel` strings: `nvcc -arch=sm_90 -ptx` each (NVRTC compiles them at run time).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from expectations import fixture_files, parse_expectations
from kanalyze.check import analyze_source

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CUDA_DIR = FIXTURES / "cuda"
CUDA_FIXTURES = sorted(p for p in fixture_files(CUDA_DIR, "*") if p.suffix in (".cu", ".cuh", ".cuda", ".py"))
NVCC = shutil.which("nvcc")


def _read(path: Path) -> str:
    """A fixture's text as kanalyze reads it: line endings kept (`read_text` would turn
    the lone "\r"s of exc001_cr_line_endings.cu into "\n" and test another file)."""
    return path.read_bytes().decode("utf-8")


@pytest.mark.parametrize("path", CUDA_FIXTURES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_cuda_fixture_expectations(path: Path) -> None:
    text = _read(path)
    expected, forbidden = parse_expectations(text)
    findings, _ = analyze_source(str(path), text)
    found = {(f.location.row, f.code) for f in findings}
    messages = {(f.location.row, f.code): f.message for f in findings}
    missing = sorted(expected - found)
    extra = sorted(found - expected)
    fired_on_lookalike = sorted(found & forbidden)
    assert not missing, f"expected findings that did not fire: {missing}"
    assert not fired_on_lookalike, f"fired on a look-alike: {[(k, messages[k]) for k in fired_on_lookalike]}"
    assert not extra, f"unexpected findings: {[(k, messages[k]) for k in extra]}"


def test_every_cuda_detector_has_flagged_and_clean_fixtures() -> None:
    from kanalyze.rules import cuda_rules

    expected_codes: set[str] = set()
    ok_codes: set[str] = set()
    kinds: dict[str, set[str]] = {}
    for path in CUDA_FIXTURES:
        expected, forbidden = parse_expectations(_read(path))
        expected_codes |= {code for _, code in expected}
        ok_codes |= {code for _, code in forbidden}
        for _, code in expected:
            kinds.setdefault(code, set()).add(path.suffix)
    for rule in cuda_rules():
        assert rule.code in expected_codes, f"{rule.code} has no flagged CUDA fixture"
        assert rule.code in ok_codes, f"{rule.code} has no clean CUDA look-alike"
    assert {".cu", ".py"} <= set().union(*kinds.values()), "fixtures cover .cu files and inline CUDA in Python"


# --- compiling the fixtures with nvcc ------------------------------------------------

def _units():
    """(fixture, unit, row where its text starts) for every CUDA unit of the fixtures, as kanalyze reads them."""
    from kanalyze.analyzer.cuda.inline import find_extensions
    from kanalyze.analyzer.cuda.sources import CudaUnit
    from kanalyze.analyzer.positions import Positions
    from kanalyze.analyzer.triton.model import TritonModule

    for path in CUDA_FIXTURES:
        text = _read(path)
        if path.suffix != ".py":
            yield path, CudaUnit(str(path), text, "file"), 1
            continue
        host = TritonModule.from_source(str(path), text)
        positions = Positions(host.module, text)
        for ext in find_extensions(host):
            for unit in ext.units:
                start = unit.source_map.origin(0, lambda node: (positions.offsets(node) or (0, 0))[0])
                yield path, unit, positions.row_column(start)[0]


def _uses_torch(unit) -> bool:
    return unit.origin.startswith("load_inline") or re.search(r"#\s*include\s*<(torch|ATen|c10)/", unit.text)


def _nvcc(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([NVCC, "-arch=sm_90", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed here")
def test_cuda_fixtures_compile(tmp_path: Path) -> None:
    torch_units, plain = [], []
    for path, unit, row in _units():
        (torch_units if _uses_torch(unit) else plain).append((path, unit, row))
    assert torch_units and plain

    # Everything that uses torch: one translation unit, one namespace per fixture.
    torch = pytest.importorskip("torch")

    include = Path(torch.__file__).parent / "include"
    includes: list[str] = ["#include <torch/extension.h>", "#include <cuda.h>", "#include <cuda_runtime.h>"]
    blocks: list[str] = []
    by_fixture: dict[Path, list] = {}
    for path, unit, row in torch_units:
        by_fixture.setdefault(path, []).append((unit, row))
    for index, (path, units) in enumerate(sorted(by_fixture.items())):
        body = [f"namespace fixture_{index} {{"]
        defined: list[str] = []
        for unit, row in sorted(units, key=lambda u: u[0].language != "c++"):  # declarations first
            # A placeholder kanalyze could not fold was read as an identifier; give it the value the
            # fixture's run-time call returns by default, so the rest of the unit compiles as written.
            for name in re.findall(r"read as `(\w+)`", " ".join(note.what for note in unit.skipped)):
                body.append(f"#define {name} 256")
                defined.append(name)
            lines = []
            for line in unit.text.splitlines():
                if re.match(r"\s*#\s*include\b", line):
                    if line.strip() not in includes:
                        includes.append(line.strip())
                    line = ""
                defined += re.findall(r"^\s*#\s*define\s+(\w+)", line)
                lines.append(line)
            body.append(f'#line {row} "{path}"')
            body.extend(lines)
        body.append("}")
        body.extend(f"#undef {name}" for name in dict.fromkeys(defined))
        blocks.append("\n".join(body))
    combined = tmp_path / "torch_fixtures.cu"
    combined.write_text("\n".join(includes) + "\n" + "\n".join(blocks) + "\n")

    def compile_combined() -> tuple[str, str]:
        result = _nvcc(["-ptx", "-std=c++17", "-w", f"-I{include}", f"-I{include / 'torch/csrc/api/include'}",
                        f"-I{sysconfig.get_paths()['include']}", str(combined), "-o", str(tmp_path / "out.ptx")],
                       tmp_path)
        return f"torch fixtures ({len(by_fixture)} files)", result.stderr[-4000:] if result.returncode else ""

    def compile_plain(item) -> tuple[str, str]:
        index, (path, unit, row) = item
        source = tmp_path / f"plain_{index}.cu"
        source.write_text(f'#line {row} "{path}"\n{unit.text}' if not unit.prelude else unit.compile_text)
        raw = unit.origin.startswith("RawKernel") or unit.origin.startswith("RawModule")
        result = _nvcc(["-ptx" if raw else "-c", str(source), "-o", str(source.with_suffix(".out"))], tmp_path)
        return f"{path} ({unit.origin})", result.stderr if result.returncode else ""

    with ThreadPoolExecutor(max_workers=max(os.cpu_count() or 2, 2)) as pool:
        jobs = [pool.submit(compile_combined)] + [pool.submit(compile_plain, item) for item in enumerate(plain)]
        failures = [f"{name}:\n{err}" for name, err in (job.result() for job in jobs) if err]
    assert not failures, "\n\n".join(failures)
