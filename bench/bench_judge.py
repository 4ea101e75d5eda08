"""The parent's value judge on outputs of a problem's real size, side by side in one run.

`check_values` (kanalyze/dynamic/compare.py) compares a candidate's output with the float64
reference within the calibrated bound; every value gate calls it once per case, so on a GPU
run at KernelBench's sizes it is most of the `judge` step (13 s of a 58 s `--gates all` run
of an 8M-element problem on the H200).  This times it beside `plain_check`, the same rule
written the plain way (each chunk upcast and masked with new arrays), alternating the two
on the same arrays, and prints the medians and their ratio.  tests/test_compare_values.py
holds both to the same answers.

    python bench/bench_judge.py                      # 1024 x 8192 float32, 5 rounds
    python bench/bench_judge.py --numel 67108864 --rounds 3
    python bench/bench_judge.py --gates              # every gate's judge: side by side or one at a time

`--gates` runs every gate on the CPU (Triton's interpreter) on a generated elementwise
problem of 1024 x 4096 float32 and its candidate, twice each way, alternating: the gates
judging side by side in threads (as `run_gates` does), then one at a time, and prints the
`judge` step's seconds, their ratio and whether the verdicts agree.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kanalyze.dynamic import compare  # noqa: E402
from kanalyze.dynamic.sandbox.transport import EPS, Leaf  # noqa: E402


def plain_bound(working: Leaf, expected64: Leaf, terms: int = 1) -> tuple[float, float]:
    reference_error, scale = 0.0, 0.0
    for _, ref, exact in compare._parts(working, expected64):
        finite = np.isfinite(ref) & np.isfinite(exact)
        reference_error = max(reference_error, float(np.max(np.abs(ref[finite] - exact[finite]), initial=0.0)))
        scale = max(scale, float(np.max(np.abs(exact[finite]), initial=0.0)))
    eps = EPS.get(working.dtype, 0.0)
    return (max(compare.FACTOR * reference_error, compare.floor_ulps(terms) * eps * (scale or 1.0)),
            reference_error)


def plain_check(observed: Leaf, working: Leaf, expected64: Leaf, terms: int = 1) -> tuple:
    """(ok, max error, bound, reference error, index, observed, expected, mismatches)."""
    bound, reference_error = plain_bound(working, expected64, terms)
    if not working.is_float or not observed.is_float:
        bound = 0.0
    worst, at, observed_at, expected_at, mismatches = -1.0, 0, None, None, 0
    for start, out, ref, exact in compare._parts(observed, working, expected64):
        considered = np.isfinite(exact) & np.isfinite(ref)
        with np.errstate(invalid="ignore", over="ignore"):
            error = np.where(considered, np.abs(out - exact), 0.0)
        error = np.where(considered & ~np.isfinite(out), np.inf, error)
        i = int(np.argmax(error))
        if error[i] > worst:
            worst, at, observed_at, expected_at = float(error[i]), start + i, float(out[i]), float(exact[i])
        mismatches += int(np.count_nonzero(error > bound))
    if not observed.array.size:
        return True, 0.0, bound, reference_error, None, None, None, 0
    index = tuple(int(i) for i in np.unravel_index(at, observed.array.shape))
    return worst <= bound, worst, bound, reference_error, index, observed_at, expected_at, mismatches


def product_check(observed: Leaf, working: Leaf, expected64: Leaf, terms: int = 1) -> tuple:
    c = compare.check_values(observed, working, expected64, terms=terms)
    return c.ok, c.max_error, c.bound, c.reference_error, c.index, c.observed, c.expected, c.mismatches


PROBLEM = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.tanh(x) * 2.0


batch_size, dim = 1024, 4096


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
"""

CANDIDATE = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def tanh2_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    e = tl.exp(-2.0 * tl.abs(x))
    t = tl.where(x < 0, -(1.0 - e) / (1.0 + e), (1.0 - e) / (1.0 + e))
    tl.store(y_ptr + offs, t * 2.0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        tanh2_kernel[(triton.cdiv(x.numel(), 65536),)](x, y, x.numel(), BLOCK=65536)
        return y
"""


def gates_side_by_side() -> int:
    import os
    import tempfile

    from kanalyze.dynamic import runner
    from kanalyze.dynamic.gates import gates_by_code
    from kanalyze.dynamic.harness import find_harness
    from kanalyze.dynamic.sandbox.process import Limits

    folder = tempfile.mkdtemp(prefix="bench-judge-")
    for name, text in (("problem.py", PROBLEM), ("candidate.py", CANDIDATE)):
        Path(folder, name).write_text(text)
    harness = find_harness(os.path.join(folder, "candidate.py"), reference=os.path.join(folder, "problem.py"))
    codes = [code for code, gate in gates_by_code().items() if not gate.kernel_harness]
    options = runner.Options(mode="cpu", max_numel=1 << 22, limits=Limits(case_seconds=300))
    cores, times, verdicts = os.cpu_count, {"side by side": [], "one at a time": []}, {}
    try:
        for _ in range(2):
            for name, count in (("side by side", cores), ("one at a time", lambda: 1)):
                runner.os.cpu_count = count
                run = runner.run_gates(harness, codes, options=options)
                times[name].append(run.environment["seconds"]["judge"])
                verdicts.setdefault(name, sorted((v.code, v.status) for v in run.verdicts))
    finally:
        runner.os.cpu_count = cores
    side, alone = (statistics.median(times[name]) for name in ("side by side", "one at a time"))
    print(f"every gate on 1024 x 4096 float32 ({os.cpu_count()} cores), judge seconds: side by side {side:.2f}, "
          f"one at a time {alone:.2f} ({alone / side:.2f}x); same verdicts: "
          f"{verdicts['side by side'] == verdicts['one at a time']}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--numel", type=int, default=1024 * 8192)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--gates", action="store_true", help="every gate's judge, side by side or one at a time")
    args = parser.parse_args()
    if args.gates:
        return gates_side_by_side()
    rng = np.random.default_rng(0)
    exact = rng.standard_normal(args.numel)
    working = exact.astype(np.float32)
    observed = (exact * (1 + 3e-7)).astype(np.float32)
    leaves = (Leaf(observed, "float32"), Leaf(working, "float32"), Leaf(exact, "float64"))
    times: dict[str, list[float]] = {"plain": [], "check_values": []}
    for _ in range(args.rounds):   # alternating: machine load hits both alike
        for name, function in (("plain", plain_check), ("check_values", product_check)):
            started = time.perf_counter()
            answer = function(*leaves)
            times[name].append(time.perf_counter() - started)
        assert plain_check(*leaves) == answer
    plain, product = (statistics.median(times[name]) for name in ("plain", "check_values"))
    print(f"{args.numel} float32 elements, {args.rounds} rounds, median seconds: plain {plain:.3f}, "
          f"check_values {product:.3f} ({plain / product:.2f}x faster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
