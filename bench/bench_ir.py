"""What the IR stage (`kanalyze check --ir`) costs next to the static check,
measured side by side in one run.

    .venv/bin/python bench/bench_ir.py                    # fixtures/ir, sm_90
    .venv/bin/python bench/bench_ir.py --corpus PATH --target sm_90,sm_100

Four runs over the same files, each with its own fresh cache directory:
static cold, static warm, static + IR cold (every kernel configuration
compiled), static + IR warm (plans and artifacts from the cache).  The
budget: a warm IR run adds at most 10% to a warm static check.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kanalyze.check import run_ir, run_static  # noqa: E402
from kanalyze.config import Config  # noqa: E402


def timed(function, *args, **kwargs):
    started = time.perf_counter()
    value = function(*args, **kwargs)
    return time.perf_counter() - started, value


def best_of(runs: int, function, *args, **kwargs) -> float:
    return min(timed(function, *args, **kwargs)[0] for _ in range(runs))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default=str(ROOT / "fixtures" / "ir"))
    parser.add_argument("--target", default="sm_90")
    parser.add_argument("--repeat", type=int, default=5, help="warm runs; the best is reported")
    args = parser.parse_args()
    paths = [args.corpus]
    targets = args.target.split(",")

    with tempfile.TemporaryDirectory() as cache_dir:
        os.environ["KANALYZE_CACHE_DIR"] = cache_dir
        config = Config(root=cache_dir)

        static_cold, _ = timed(run_static, paths, config)
        static_warm = best_of(args.repeat, run_static, paths, config)

        def check_with_ir():
            return run_ir(paths, config, run_static(paths, config), targets=targets)

        ir_cold, result = timed(check_with_ir)
        compiled_note = next(n for n in result.notes if n.startswith("IR:"))
        compiled = int(compiled_note.split()[1])
        ir_warm = best_of(args.repeat, check_with_ir)
        warm_note = next(n for n in check_with_ir().notes if n.startswith("IR:"))

        # What a user sees: the command, start-up included, both warm.
        command = [sys.executable, "-m", "kanalyze", "check", "--isolated", "--exit-zero", "-q", *paths]
        env = {**os.environ, "KANALYZE_CACHE_DIR": cache_dir}
        cli_static = best_of(args.repeat, subprocess.run, command, env=env, capture_output=True)
        cli_ir = best_of(args.repeat, subprocess.run, [*command, "--ir", "--target", args.target],
                         env=env, capture_output=True)

    print(f"corpus: {args.corpus}  targets: {', '.join(targets)}  cores: {os.cpu_count()}")
    print(f"  {compiled_note}")
    print(f"  warm: {warm_note}")
    print(f"static check, cold               {static_cold:8.3f} s")
    print(f"static check, warm (best of {args.repeat})    {static_warm:8.3f} s")
    print(f"static + IR, cold                {ir_cold:8.3f} s   "
          f"({(ir_cold - static_warm) / max(compiled, 1):.2f} s per kernel configuration)")
    print(f"static + IR, warm (best of {args.repeat})     {ir_warm:8.3f} s")
    print(f"`kanalyze check`, warm            {cli_static:8.3f} s")
    print(f"`kanalyze check --ir`, warm       {cli_ir:8.3f} s")
    print(f"warm IR adds {(ir_warm - static_warm) * 1000:.1f} ms in process "
          f"({(ir_warm - static_warm) / static_warm:+.0%} of a fully cached static check) and "
          f"{(cli_ir - cli_static) / cli_static:+.1%} to the `kanalyze check` command (budget: +10%); "
          f"cold IR / warm IR = {ir_cold / ir_warm:.0f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
