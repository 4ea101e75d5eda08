#!/usr/bin/env python3
"""Whether PyTorch's own forward gives the same bits run after run, under torch's defaults and
under kanalyze's numerics policy (kanalyze/dynamic/numerics.py), on the GPU.

A candidate that keeps part of the reference in PyTorch (a transposed convolution, say) runs
torch's kernels beside its own; where torch's are not deterministic, ORD001 and ORD002 would
see bits change from run to run that are not the candidate's.  For each KernelBench problem
file given, at its own sizes, in one process: the reference model is built from one seed,
called RUNS times on the same inputs with torch's defaults for determinism (cuDNN picks any
algorithm), then RUNS times with the policy's determinism settings (TF32 off in both, as the
policy has it); printed, per problem, how many
distinct results each gave (1: every run gave the same bits), the policy's slowdown of one
call, and the ops torch named as having no deterministic implementation.

    python3 bench/torch_determinism.py .corpus/problems/level1/61_conv_transposed_3D*.py --runs 10

The problem files are KernelBench's (trusted: this bench runs them in its own process).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kanalyze.dynamic import numerics  # noqa: E402

os.environ.setdefault(*numerics.CUBLAS_WORKSPACE)   # before the first cuBLAS call, as a worker does


def digests(model, inputs, runs: int) -> tuple[set[str], float, list[str]]:
    """The distinct digests of the outputs of `runs` calls, the median seconds of a call, and
    the ops that warned they are not deterministic."""
    import torch

    seen, times = set(), []
    with numerics.alerts() as alerted, torch.no_grad():
        for _ in range(runs):
            torch.cuda.synchronize()
            started = time.perf_counter()
            out = model(*inputs)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - started)
            outs = out if isinstance(out, (tuple, list)) else [out]
            digest = hashlib.sha256()
            for tensor in outs:
                digest.update(tensor.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes())
            seen.add(digest.hexdigest()[:12])
            del out, outs
    return seen, sorted(times)[len(times) // 2], list(alerted)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("problems", nargs="+", type=Path)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args(argv)
    import torch

    from kanalyze.dynamic.loading import load_problem

    numerics.apply(cuda=True)   # TF32 off for both columns: they differ in determinism alone
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, {args.runs} runs each")
    print(f"{'problem':58} {'default':>8} {'policy':>8} {'slowdown':>9}  alerts")
    for path in args.problems:
        try:
            problem, _ = load_problem(str(path), {})   # at its own sizes
            torch.manual_seed(42)
            model = problem.Model(*problem.get_init_inputs()).cuda().eval()
            torch.manual_seed(42)
            inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
            torch.use_deterministic_algorithms(False)
            torch.backends.cudnn.deterministic = False
            default, default_s, _ = digests(model, inputs, args.runs)
            numerics.hold_deterministic()
            policy, policy_s, alerted = digests(model, inputs, args.runs)
        except Exception as exc:  # a problem too big for the card, say: the others go on
            print(f"{path.stem[:58]:58} failed: {type(exc).__name__}: {str(exc)[:80]}")
        else:
            print(f"{path.stem[:58]:58} {len(default):>8} {len(policy):>8} {policy_s / default_s:>8.2f}×  "
                  f"{', '.join(alerted) or '-'}")
        finally:
            problem = model = inputs = None
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
