"""Dynamic gates: wall time per fixture kernel, targeted and all gates, beside KernelBench's check.

For each positive control of fixtures/kernelbench/controls.json (the planted
candidate, or with --role its clean twin), measured side by side in this one
process:

  kernelbench  KernelBench-style evaluation in this process: import the problem
               and the candidate, build both models from the same seed, then 5
               trials of fresh `get_inputs()` and `torch.allclose(ref, out,
               atol=1e-2, rtol=1e-2)`.  Kernels are compiled once, untimed,
               before anything is timed, so that every column sees a warm
               Triton cache.
  targeted     `run_gates` for the clause the kernel was planted for (what
               `check --dynamic` runs for a flag): two sandboxed worker
               processes, the reference's cases in float64 too, the witness.
  all          `run_gates` for every gate (`check --gates all`).

    .venv/bin/python bench/bench_dynamic.py                  # CPU: Triton's interpreter
    python3 bench/bench_dynamic.py --device cuda --role both # a GPU
    ... --json results.json                                  # every number, for the README
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
KB = ROOT / "fixtures" / "kernelbench"


def kernelbench_style(harness, device: str, trials: int = 5) -> tuple[float, bool]:
    """KernelBench's check, in this process: (seconds, every trial allclose)."""
    import torch

    from kanalyze.dynamic.loading import load_candidate, load_problem

    started = time.perf_counter()
    problem = load_problem(harness.problem, harness.knobs)
    candidate = load_candidate(harness.candidate)
    torch.manual_seed(42)
    init = problem.get_init_inputs()
    torch.manual_seed(42)
    model = problem.Model(*init).to(device)
    torch.manual_seed(42)
    model_new = candidate.ModelNew(*init).to(device)
    passed = True
    with torch.no_grad():
        for trial in range(trials):
            torch.manual_seed(trial)
            inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
            expected = model(*inputs)
            try:
                observed = model_new(*inputs)
                if device == "cuda":
                    torch.cuda.synchronize()
                passed &= bool(observed.shape == expected.shape and
                               torch.allclose(observed, expected, atol=1e-2, rtol=1e-2))
            except Exception:
                passed = False
    return time.perf_counter() - started, passed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--role", choices=("plant", "twin", "both"), default="plant",
                        help="the planted candidates (default), their clean twins, or both")
    parser.add_argument("--only", help="comma-separated clauses")
    parser.add_argument("--json", help="write every number here")
    args = parser.parse_args()

    from kanalyze.dynamic.gates import gates_by_code
    from kanalyze.dynamic.harness import find_harness
    from kanalyze.dynamic.runner import Options, resolve_mode, run_gates

    mode = resolve_mode(args.device)
    if mode == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported, as in the workers
        import torch  # noqa: F401

        from kanalyze.dynamic import devicemap

        devicemap.install("cpu")
    import torch
    import triton

    controls = {k: v for k, v in json.loads((KB / "controls.json").read_text()).items() if not k.startswith("_")}
    codes = sorted(controls) if not args.only else [c.strip().upper() for c in args.only.split(",")]
    everything = sorted(gates_by_code())
    device = "cuda" if mode == "cuda" else "cpu"
    where = torch.cuda.get_device_name(0) if mode == "cuda" else "CPU, Triton interpreter"
    print(f"device: {where}; torch {torch.__version__}, triton {triton.__version__}; {os.cpu_count()} cores")
    rows = []
    for code in codes:
        for role in ("plant", "twin") if args.role == "both" else (args.role,):
            name = controls[code][role]
            harness = find_harness(str(KB / "candidates" / name), kernelbench=str(KB))
            kernelbench_style(harness, device, trials=1)          # compile once, untimed
            kb_seconds, kb_passed = kernelbench_style(harness, device)
            # targeted: the gate a static flag of this clause asks for (as `check --dynamic`)
            targeted = run_gates(harness, [code], {code: [{"row": None}]}, options=Options(mode=mode))
            full = run_gates(harness, everything, options=Options(mode=mode))
            verdict = next(v for v in targeted.verdicts if v.code == code)
            confirmed_all = sorted(v.code for v in full.verdicts if v.status == "confirmed")
            rows.append({"clause": code, "role": role, "kernel": name, "kernelbench_s": kb_seconds,
                         "kernelbench_allclose": kb_passed, "targeted_s": targeted.seconds, "all_s": full.seconds,
                         "verdict": verdict.status, "summary": verdict.summary, "all_confirmed": confirmed_all,
                         "sizes": targeted.sizes})
            r = rows[-1]
            if len(rows) == 1:
                print(f"sandbox: {targeted.environment.get('candidate_confinement')}")
            print(f"{code} {role:5} {name:48} kb {kb_seconds:6.2f}s ({'pass' if kb_passed else 'FAIL'})  "
                  f"targeted {r['targeted_s']:6.2f}s ({r['targeted_s'] / kb_seconds:5.1f}x)  "
                  f"all {r['all_s']:6.2f}s ({r['all_s'] / kb_seconds:5.1f}x)  {code} {verdict.status}; "
                  f"all gates confirm: {', '.join(confirmed_all) or 'nothing'}", flush=True)
    kb = sum(r["kernelbench_s"] for r in rows)
    targeted = sum(r["targeted_s"] for r in rows)
    full = sum(r["all_s"] for r in rows)
    print(f"\ntotal over {len(rows)} kernels: kernelbench {kb:.1f}s, targeted {targeted:.1f}s "
          f"({targeted / kb:.1f}x), all gates {full:.1f}s ({full / kb:.1f}x)")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": where, "torch": torch.__version__,
                                               "triton": triton.__version__, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
