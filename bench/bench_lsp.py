"""Editor latency: didChange → publishDiagnostics of `kanalyze lsp`, measured side by side
with bare analyses of the same texts (whole, and incremental as the server's worker runs
it), in one run.

Two generated files of about 1,000 lines each, written fresh at every run:
  - kernels: the fixtures' clean matmul kernel, repeated under new names;
  - host: the same kernel paired with a wrapper that allocates the output and
    launches it, as a library module of kernel+wrapper pairs is written (the
    host code is what layout.py has to cut around).
Each is opened in a real server started as a subprocess and driven over stdio
by pygls's client.  Each measured edit
flips one kernel's `tl.dot` between TF32 and IEEE (so the diagnostics really
change) and puts a new comment on that line (so no two texts, and no two
versions of that kernel, are alike and no cache answers for it); the kernel
edited moves through the file from one edit to the next.

  - single edit: an edit after a pause, the way a person edits; the latency
    is from sending didChange to receiving the diagnostics of that version;
  - burst: five edits 30 ms apart (typing), from the last edit to its
    diagnostics, which shows the debounce at work.
The bare analyses run with the proof settings the server uses by default (MEM003 and
MEM004 are not selected, so no z3), and say how many edits were analyzed whole.
Target: a single edit under 200 ms warm.  Printed, never asserted.

    python bench/bench_lsp.py [--lines 1000] [--edits 9] [--debounce 150] [--files kernels,host]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FIXED = 'tl.dot(a, b, input_precision="ieee")'
DEFECT = "tl.dot(a, b)"


def kernel_file(lines: int) -> str:
    """About `lines` lines of Triton: one clean kernel repeated under new names."""
    fixture = (ROOT / "fixtures/triton/prc001_tf32_matmul.py").read_text()
    kernel = fixture.split("@triton.jit")[2]  # matmul_ieee_kernel: clean, 20 lines
    parts = ["# kernels for bench_lsp.py\nimport triton\nimport triton.language as tl\n\n"]
    index = 0
    while sum(p.count("\n") for p in parts) < lines:
        parts.append("\n@triton.jit" + kernel.replace("matmul_ieee_kernel", f"matmul_{index}_kernel").rstrip() + "\n\n")
        index += 1
    return "".join(parts)


HEADER = "import torch\nimport triton\nimport triton.language as tl\n\n"
WRAPPER = '''
def matmul_{index}(a, b):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    matmul_{index}_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                c.stride(0), c.stride(1), BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    return c

'''


def host_file(lines: int) -> str:
    """About `lines` lines of kernel+wrapper pairs: the clean kernel, and a wrapper that launches it."""
    fixture = (ROOT / "fixtures/triton/prc001_tf32_matmul.py").read_text()
    kernel = fixture.split("@triton.jit")[2]
    parts = ["# kernels and their wrappers for bench_lsp.py\n" + HEADER]
    index = 0
    while sum(p.count("\n") for p in parts) < lines:
        parts.append("\n@triton.jit" + kernel.replace("matmul_ieee_kernel", f"matmul_{index}_kernel").rstrip()
                     + "\n\n" + WRAPPER.format(index=index))
        index += 1
    return "".join(parts)


FILES = {"kernels": kernel_file, "host": host_file}


def edited(text: str, number: int) -> str:
    """Edit `number` of the base text: one kernel's dot line gets the comment `# edit
    number`, and its dot is TF32 on odd edits.  Edit n changes kernel 7n modulo the count."""
    starts = [m.start() for m in re.finditer(re.escape(FIXED), text)]
    at = starts[number * 7 % len(starts)]
    dot = DEFECT if number % 2 else FIXED
    return text[:at] + f"{dot}  # edit {number}" + text[at + len(FIXED):]


def bare_times(path: str, base: str, texts: list[str]) -> tuple[list[float], list[float], int]:
    """Seconds per text of a whole analysis (`analyze_text`), and of the analysis the
    server's worker runs (incremental.py), that one having seen the base text first,
    as the server has after didOpen; and how many of the texts it analyzed whole.
    Both with the proof settings the server gives a file under the default configuration."""
    from kanalyze.check import analyze_text
    from kanalyze.config import load_config
    from kanalyze.lsp.configuration import proof_settings
    from kanalyze.lsp.incremental import IncrementalAnalyzer

    proofs = proof_settings(load_config([path], isolated=True))
    analyze_text(path, base, proofs)  # imports and first-call costs, as the server's warm-up
    whole = []
    for text in texts:
        start = time.perf_counter()
        analyze_text(path, text, proofs)
        whole.append(time.perf_counter() - start)
    analyzer = IncrementalAnalyzer()
    analyzer.analyze(path, base, "python", proofs)
    analyzer.stats.clear()
    incremental = []
    for text in texts:
        start = time.perf_counter()
        analyzer.analyze(path, text, "python", proofs)
        incremental.append(time.perf_counter() - start)
    return whole, incremental, analyzer.stats["whole"]


async def lsp_times(path: Path, base: str, edits: int, debounce: int) -> dict[str, object]:
    from lsprotocol import types
    from pygls.lsp.client import LanguageClient

    client = LanguageClient("bench", "1")
    arrivals: dict[int, tuple[float, int]] = {}
    arrived = asyncio.Event()

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def on_diagnostics(ls, params: types.PublishDiagnosticsParams) -> None:
        arrivals[params.version] = (time.perf_counter(), len(params.diagnostics))
        arrived.set()

    async def wait_for(version: int) -> tuple[float, int]:
        while version not in arrivals:
            arrived.clear()
            await asyncio.wait_for(arrived.wait(), 120)
        return arrivals[version]

    await client.start_io(sys.executable, "-m", "kanalyze", "lsp", cwd=str(path.parent))
    await client.initialize_async(types.InitializeParams(
        capabilities=types.ClientCapabilities(), root_uri=path.parent.as_uri(),
        initialization_options={"debounce": debounce}))
    client.initialized(types.InitializedParams())
    uri = path.as_uri()
    start = time.perf_counter()
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
        uri=uri, language_id="python", version=0, text=base)))
    cold = (await wait_for(0))[0] - start

    def change(version: int, text: str) -> None:
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))

    single, counts = [], []
    version = 0
    for number in range(1, edits + 1):
        await asyncio.sleep(debounce / 1000 + 0.1)  # a pause, as between a person's edits
        version += 1
        start = time.perf_counter()
        change(version, edited(base, number))
        arrival, count = await wait_for(version)
        single.append(arrival - start)
        counts.append(count)

    bursts = []
    for _ in range(3):
        await asyncio.sleep(debounce / 1000 + 0.1)
        for step in range(5):
            version += 1
            change(version, edited(base, 100 + version))
            last = time.perf_counter()
            await asyncio.sleep(0.03)
        last_version = version
        arrival, _ = await wait_for(last_version)
        bursts.append(arrival - last)
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return {"cold": cold, "single": single, "bursts": bursts, "counts": counts}


def measure(name: str, args: argparse.Namespace) -> float:
    """Measure one generated file and print its table; the median single edit, seconds."""
    base = FILES[name](args.lines)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.py"
        path.write_text(base)
        texts = [edited(base, n) for n in range(1, args.edits + 1)]
        bare, incremental, analyzed_whole = bare_times(str(path), base, texts)
        lsp = asyncio.run(lsp_times(path, base, args.edits, args.debounce))

    flips = lsp["counts"]
    assert all(count == number % 2 for number, count in zip(range(1, args.edits + 1), flips)), (
        f"the diagnostics did not follow the edits: {flips}")
    bare_median = statistics.median(bare)
    incremental_median = statistics.median(incremental)
    single = statistics.median(lsp["single"])
    ms = 1000
    print(f"{name} file: {base.count(chr(10))} lines, {len(base.encode())} bytes; {args.edits} edits "
          f"({analyzed_whole} of them analyzed whole by the incremental analysis); debounce {args.debounce} ms")
    print(f"{'measurement':<48} {'median ms':>10} {'min–max ms':>12} {'× whole':>8}")
    rows = [("bare analyze_text of the whole text", bare),
            ("bare incremental analysis (the worker's)", incremental),
            ("LSP didChange → diagnostics, single edit", lsp["single"]),
            ("LSP last change of a burst → diagnostics", lsp["bursts"]),
            ("LSP didOpen → diagnostics (first document)", [lsp["cold"]])]
    for label, times in rows:
        median = statistics.median(times)
        spread = f"{min(times) * ms:.0f}–{max(times) * ms:.0f}"
        print(f"{label:<48} {median * ms:>10.0f} {spread:>12} {median / bare_median:>8.2f}")
    verdict = "met" if single < 0.2 else "not met"
    print(f"target single edit < 200 ms warm: {verdict} ({single * ms:.0f} ms; "
          f"server overhead {(single - incremental_median) * ms:+.0f} ms over the bare incremental analysis)")
    return single


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--edits", type=int, default=9)
    parser.add_argument("--debounce", type=int, default=150, help="the server's debounce setting, ms")
    parser.add_argument("--files", default="kernels,host", help="which generated files: kernels, host, or both")
    args = parser.parse_args()
    names = [n.strip() for n in args.files.split(",") if n.strip()]
    unknown = [n for n in names if n not in FILES]
    if unknown or not names:
        parser.error(f"--files takes {', '.join(FILES)}; got {args.files!r}")
    singles = {}
    for index, name in enumerate(names):
        if index:
            print()
        singles[name] = measure(name, args)
    if len(singles) > 1:
        print("\nsingle edit, median: " + ", ".join(f"{n} {s * 1000:.0f} ms" for n, s in singles.items()))


if __name__ == "__main__":
    main()
