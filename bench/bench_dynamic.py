"""Dynamic gates: wall time per fixture kernel, targeted and all gates, beside KernelBench's check.

For each positive control of fixtures/kernelbench/controls.json (the planted
candidate, or with --role its clean twin), measured side by side in this one
process:

  kernelbench  KernelBench-style evaluation in this process: import the problem
               and the candidate, build both models from the same seed, then 5
               trials of fresh `get_inputs()` and `torch.allclose(ref, out,
               atol=1e-2, rtol=1e-2)`.  Kernels are compiled once, untimed,
               before anything is timed, so that every column sees a warm
               Triton cache.  (The issue's denominator.)
  kb-spawn     KernelBench's own batch evaluation (scripts/eval_from_generations.py):
               a fresh process per kernel (multiprocessing, start method
               "spawn", a Pool of one), which imports torch, loads the problem
               and the candidate from source and runs the same 5 trials.
               Triton's on-disk cache is warm for it too.  `--no-spawn` skips it.
  targeted     `run_gates` for the clause the kernel was planted for (what
               `check --dynamic` runs for a flag): sandboxed workers forked from
               this process's zygote (started once, before the timings, and
               reported), the reference's cases in float64 too.
  all          `run_gates` for every gate (`check --gates all`).
  fresh        with `--compare-fresh`: targeted and all again with
               KANALYZE_NO_ZYGOTE=1, every worker a fresh `python` process
               (the start method before the zygote), side by side.

Each start method begins every kernel with an empty reference cache (the
reference worker's results are otherwise reused across candidates of one
problem), so both see the same work.

On a GPU the CUDA C++ controls (`cuda` in controls.json) follow the Triton
ones; their extensions come from the shared build cache (extensions.py), so a
kernel built by an earlier run or by pytest is not compiled again.

    .venv/bin/python bench/bench_dynamic.py                  # CPU: Triton's interpreter
    python3 bench/bench_dynamic.py --device cuda --role both # a GPU
    ... --compare-fresh                                      # zygote vs fresh processes
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
    started = time.perf_counter()
    passed = _evaluate(harness.problem, harness.candidate, dict(harness.knobs), device, trials)
    return time.perf_counter() - started, passed


def kernelbench_spawned(harness, device: str, trials: int = 5) -> tuple[float, bool]:
    """KernelBench's batch evaluation: a spawned process per kernel (seconds, every trial allclose)."""
    import multiprocessing

    started = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        passed = pool.apply(_spawned_evaluation, (harness.problem, harness.candidate, dict(harness.knobs), device,
                                                  trials))
    return time.perf_counter() - started, passed


def _spawned_evaluation(problem: str, candidate: str, knobs: dict, device: str, trials: int) -> bool:
    if device == "cpu":  # TRITON_INTERPRET=1 came with the environment, before triton is imported
        from kanalyze.dynamic import devicemap

        devicemap.install("cpu")
    return _evaluate(problem, candidate, knobs, device, trials)


def _evaluate(problem_path: str, candidate_path: str, knobs: dict, device: str, trials: int) -> bool:
    import torch

    from kanalyze.dynamic.loading import load_candidate, load_problem

    problem, _ = load_problem(problem_path, knobs)
    candidate = load_candidate(candidate_path)
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
    return passed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--role", choices=("plant", "twin", "both"), default="plant",
                        help="the planted candidates (default), their clean twins, or both")
    parser.add_argument("--only", help="comma-separated clauses")
    parser.add_argument("--kind", choices=("triton", "cuda", "both"), default="both",
                        help="Triton controls, CUDA C++ controls (GPU only), or both (default)")
    parser.add_argument("--compare-fresh", action="store_true",
                        help="also time every kernel with fresh worker processes (KANALYZE_NO_ZYGOTE=1)")
    parser.add_argument("--no-spawn", action="store_true", help="leave out the kb-spawn column")
    parser.add_argument("--json", help="write every number here")
    args = parser.parse_args()

    from kanalyze.dynamic.gates import gates_by_code
    from kanalyze.dynamic.harness import find_harness
    from kanalyze.dynamic.reference_cache import REFERENCES
    from kanalyze.dynamic.runner import Options, resolve_mode, run_gates
    from kanalyze.dynamic.sandbox.process import prestart_zygote

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
    started = time.perf_counter()
    workers = prestart_zygote(mode)
    print(f"workers: {workers}; the zygote's start took {time.perf_counter() - started:.2f} s, once per kanalyze "
          "process, outside the timings below")
    starts = [("zygote", None)] + ([("fresh", "1")] if args.compare_fresh else [])
    rows = []
    # Triton controls, then on a GPU the CUDA C++ ones (load_inline: they need the device).
    kinds = [("triton", controls[code], code) for code in codes] if args.kind != "cuda" else []
    if mode == "cuda" and args.kind != "triton":
        kinds += [("cuda", controls[code]["cuda"], code) for code in codes if "cuda" in controls[code]]
    for kind, entry, code in kinds:
        for role in ("plant", "twin") if args.role == "both" else (args.role,):
            name = entry[role]
            harness = find_harness(str(KB / "candidates" / name), kernelbench=str(KB))
            kernelbench_style(harness, device, trials=1)          # compile once, untimed
            kb_seconds, kb_passed = kernelbench_style(harness, device)
            spawn_seconds = None if args.no_spawn else kernelbench_spawned(harness, device)[0]
            row = {"clause": code, "kind": kind, "role": role, "kernel": name, "kernelbench_s": kb_seconds,
                   "kernelbench_allclose": kb_passed, "kernelbench_spawn_s": spawn_seconds}
            for label, no_zygote in starts:
                REFERENCES.clear()
                os.environ.pop("KANALYZE_NO_ZYGOTE", None)
                if no_zygote:
                    os.environ["KANALYZE_NO_ZYGOTE"] = no_zygote
                try:
                    # targeted: the gate a static flag of this clause asks for (as `check --dynamic`)
                    targeted = run_gates(harness, [code], {code: [{"row": None}]}, options=Options(mode=mode))
                    full = run_gates(harness, everything, options=Options(mode=mode))
                finally:
                    os.environ.pop("KANALYZE_NO_ZYGOTE", None)
                suffix = "" if label == "zygote" else f"_{label}"
                verdict = next(v for v in targeted.verdicts if v.code == code)
                row.update({f"targeted{suffix}_s": targeted.seconds, f"all{suffix}_s": full.seconds,
                            f"start{suffix}": targeted.environment.get("candidate_confinement", {}).get("start")})
                if label == "zygote":
                    row.update(verdict=verdict.status, summary=verdict.summary, sizes=targeted.sizes,
                               all_confirmed=sorted(v.code for v in full.verdicts if v.status == "confirmed"))
                    if not rows:
                        print(f"sandbox: {targeted.environment.get('candidate_confinement')}")
            rows.append(row)
            print(_line(row), flush=True)
    print(_totals(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"device": where, "torch": torch.__version__,
                                               "triton": triton.__version__, "workers": workers, "rows": rows}, indent=2))
    return 0


def _line(r: dict) -> str:
    kb, spawn = r["kernelbench_s"], r["kernelbench_spawn_s"]

    def cell(key: str) -> str:
        text = f"{key.removesuffix('_s').replace('_', ' ')} {r[key]:6.2f}s ({r[key] / kb:5.1f}x"
        return text + (f", {r[key] / spawn:4.2f}x spawn)" if spawn else ")")

    spawned = f"  kb-spawn {spawn:5.2f}s" if spawn else ""
    keys = [k for k in ("targeted_s", "all_s", "targeted_fresh_s", "all_fresh_s") if k in r]
    return (f"{r['clause']} {r['role']:5} {r['kernel']:48} kb {kb:6.2f}s ({'pass' if r['kernelbench_allclose'] else 'FAIL'})"
            f"{spawned}  " + "  ".join(cell(k) for k in keys) +
            f"  {r['clause']} {r['verdict']}; all gates confirm: {', '.join(r['all_confirmed']) or 'nothing'}")


def _totals(rows: list[dict]) -> str:
    kb = sum(r["kernelbench_s"] for r in rows)
    spawn = sum(r["kernelbench_spawn_s"] or 0 for r in rows)
    parts = [f"kernelbench {kb:.1f}s"] + ([f"kb-spawn {spawn:.1f}s"] if spawn else [])
    for key in ("targeted_s", "all_s", "targeted_fresh_s", "all_fresh_s"):
        if rows and key in rows[0]:
            total = sum(r[key] for r in rows)
            ratio = f"{total / kb:.1f}x" + (f", {total / spawn:.2f}x spawn" if spawn else "")
            parts.append(f"{key.removesuffix('_s').replace('_', ' ')} {total:.1f}s ({ratio})")
    return f"\ntotal over {len(rows)} kernels: " + ", ".join(parts)


if __name__ == "__main__":
    sys.exit(main())
