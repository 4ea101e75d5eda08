#!/usr/bin/env python3
"""The ecosystem check, as ruff has one: kanalyze over code nobody here wrote.

Each project of bench/ecosystem/projects.json (production Triton libraries, the
reference kernels of a benchmark, corpora of LLM-written KernelBench solutions)
is fetched at its pinned commit into a cache (never into this repository),
checked file by file, and compared with the triage kept in
bench/ecosystem/triage/<CODE>.jsonl: one line per judged finding,

    {"project": "fla", "path": "fla/ops/x.py", "line": 12, "code": "PRC001",
     "verdict": "true" | "by-design" | "false", "why": "one line", "message": "..."}

`true`: the fact the message states holds and it matters; `by-design`: the fact
holds but the project chose it (a documented policy); `false`: the fact does not
hold (a bug to fix, or a fixture that documents why it stays).  A finding that claims a
condition ("if they are float32, ...") is judged on the project's code, from its public API
to the launch: `false` where no path through it can meet the condition (a dtype check on the
way, a cast, data the project makes itself in another dtype, a kernel nothing reachable
launches); what the project's tests happen to feed never decides it.

    python bench/ecosystem.py                         # the table
    python bench/ecosystem.py --mirror /work/.mirror  # fetch from local bare mirrors
    python bench/ecosystem.py --sample CMP003         # untriaged findings to judge, 8 per project

It prints, per clause and project: findings, how many are triaged and how, the
share whose fact does not hold, and findings not yet triaged; per project, the
`error` findings under the profile each file gets (library files: `library`)
and the share of those the triage marks `true`; the false share per clause again, over
the findings each file's profile reports (what a user of the defaults sees; the target
stays on every finding); the time per file (p50, p99,
max, CPU seconds of one process on this machine).  Targets (issue: static precision): a false
share ≤ 5% for every clause; ≥ 80% of library-profile errors `true`; no file
over 5 s.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kanalyze.analyzer.sources import discover  # noqa: E402
from kanalyze.analyzer.project_index import ProjectIndex  # noqa: E402
from kanalyze.check import run_static  # noqa: E402
from kanalyze.config import load_config  # noqa: E402
from kanalyze.profile import LIBRARY, apply_profiles  # noqa: E402

HERE = Path(__file__).resolve().parent / "ecosystem"
SOURCE_SUFFIXES = (".py", ".cu", ".cuh")
VERDICTS = ("true", "by-design", "false")
FILE_TARGET_S, FALSE_TARGET, LIBRARY_TRUE_TARGET = 5.0, 0.05, 0.80


# ------------------------------------------------------------------ fetching

def materialise(project: dict, cache: Path, mirror: Path | None) -> Path:
    """The project's source files at its pinned commit, under `cache` (fetched once)."""
    version = project["commit"]
    if project.get("corpus"):  # pinned by its lock file: a changed lock is a new corpus
        version = hashlib.sha256((ROOT / project["corpus"] / project["commit"]).read_bytes()).hexdigest()
    target = cache / f"{project['name']}-{version[:12]}"
    done = target / ".complete"
    if done.exists():
        return target
    if project.get("corpus"):  # the development corpus, fetched file by file from its lock
        fetch = [sys.executable, str(ROOT / project["corpus"] / "fetch_corpus.py"), str(target), "--no-check"]
        subprocess.run(fetch + (["--from-mirror", str(mirror)] if mirror else []), check=True)
        done.write_text(project["commit"])
        return target
    git_dir = _git_dir(project, cache, mirror)
    listing = subprocess.run(["git", "-C", str(git_dir), "ls-tree", "-r", project["commit"], "--", *project["paths"]],
                             check=True, capture_output=True, text=True).stdout
    for line in listing.splitlines():
        meta, path = line.split("\t", 1)
        _, kind, blob = meta.split()
        if kind != "blob" or not path.endswith(SOURCE_SUFFIXES):
            continue
        content = subprocess.run(["git", "-C", str(git_dir), "cat-file", "blob", blob], capture_output=True).stdout
        (target / path).parent.mkdir(parents=True, exist_ok=True)
        (target / path).write_bytes(content)
    done.write_text(project["commit"])
    return target


def _git_dir(project: dict, cache: Path, mirror: Path | None) -> Path:
    if mirror is not None:
        for candidate in (mirror / project["repo"].replace("/", "+") / "repo", mirror / project["repo"]):
            if candidate.exists():
                return candidate
    clone = cache / "git" / project["repo"].replace("/", "+")
    if not clone.exists():
        clone.mkdir(parents=True)
        subprocess.run(["git", "init", "-q", "--bare", str(clone)], check=True)
    if subprocess.run(["git", "-C", str(clone), "cat-file", "-e", project["commit"]], capture_output=True).returncode:
        subprocess.run(["git", "-C", str(clone), "fetch", "-q", "--depth", "1", "--filter=blob:limit=4m",
                        f"https://github.com/{project['repo']}.git", project["commit"]], check=True)
    return clone


# ------------------------------------------------------------------ checking

def check_project(project: dict, root: Path, proofs: bool = False) -> tuple[list, dict[str, str], list[tuple]]:
    """Every source file checked on its own, linked by the project's import index, timed:
    (findings, profiles, [(path, seconds, seconds with the MEM003/MEM004 proofs or None)]).
    Paths are relative to the project's root."""
    config = load_config([str(root)], isolated=True)
    with_proofs = load_config([str(root)], isolated=True, select=["ALL"])
    findings, profiles, times = [], {}, []
    previous = os.getcwd()
    os.chdir(root)
    try:
        files = [path for base in project["paths"] if os.path.exists(base)
                 for path, _ in discover([base], config.exclude, root=".")]
        # One import index over the project, as `kanalyze check` builds over what it checks, so
        # that kernels launched from another module are known as such (analyzer/project_index.py).
        index = ProjectIndex.build({path: Path(path).read_text(encoding="utf-8", errors="replace")
                                    for path in files})
        for path in sorted(files):
            # CPU seconds of this process (what the per-file budget counts): steadier than wall
            # time on a shared machine.
            started = time.process_time()
            result = run_static([path], config, use_cache=False, jobs=1, index=index)
            seconds = time.process_time() - started
            proved = None
            if proofs:  # side by side, file by file: the same machine load for both
                started = time.process_time()
                run_static([path], with_proofs, use_cache=False, jobs=1, index=index)
                proved = time.process_time() - started
            times.append((path, seconds, proved))
            findings.extend(result.findings)
            profiles.update(result.profiles)
    finally:
        os.chdir(previous)
    return findings, profiles, times


# ------------------------------------------------------------------ triage

def load_triage() -> dict[tuple, dict]:
    triage = {}
    for path in sorted((HERE / "triage").glob("*.jsonl")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            entry = json.loads(line)
            if entry.get("verdict") not in VERDICTS:
                raise SystemExit(f"{path}:{number}: verdict must be one of {', '.join(VERDICTS)}")
            triage[(entry["project"], entry["path"], entry["line"], entry["code"])] = entry
    return triage


def key(project: str, finding) -> tuple:
    return (project, finding.location.file, finding.location.row, finding.code)


def _spread(project: str, finding) -> str:
    """A fixed pseudo-random order, so a sample is neither the first files nor hand-picked."""
    return hashlib.sha256(repr(key(project, finding)).encode()).hexdigest()


def sample(runs: dict, triage: dict, code: str, per: int) -> None:
    for name, (findings, _, _) in runs.items():
        mine = [f for f in findings if f.code == code and not f.informational]
        judged = sum(1 for f in {key(name, f): f for f in mine} if f in triage)
        pending = sorted((f for f in mine if key(name, f) not in triage), key=lambda f: _spread(name, f))
        for finding in pending[:max(0, per - judged)]:
            print(json.dumps({"project": name, "path": finding.location.file, "line": finding.location.row,
                              "code": code, "verdict": "", "why": "", "kernel": finding.kernel,
                              "message": finding.message[:300]}))


# ------------------------------------------------------------------ the table

def report(projects: list[dict], runs: dict, triage: dict) -> bool:
    """Print the tables; True when every target is met."""
    met = True
    by_clause: dict[str, Counter] = defaultdict(Counter)
    print(f"{'clause':<8} {'project':<15} {'findings':>8} {'triaged':>7} {'true':>5} {'design':>6} {'false':>5} "
          f"{'false%':>6} {'new':>5}")
    for project in projects:
        name = project["name"]
        findings = [f for f in runs[name][0] if not f.informational]
        for code in sorted({f.code for f in findings}):
            mine = {key(name, f): f for f in findings if f.code == code}
            verdicts = Counter(triage[k]["verdict"] for k in mine if k in triage)
            judged = sum(verdicts.values())
            by_clause[code].update(verdicts)
            false_share = verdicts["false"] / judged if judged else None
            print(f"{code:<8} {name:<15} {len(mine):>8} {judged:>7} {verdicts['true']:>5} {verdicts['by-design']:>6} "
                  f"{verdicts['false']:>5} {_pct(false_share):>6} {len(mine) - judged:>5}")
    print("\nper clause, over every project (target: false ≤ 5%)")
    for code, verdicts in sorted(by_clause.items()):
        judged = sum(verdicts.values())
        share = verdicts["false"] / judged if judged else None
        ok = share is not None and share <= FALSE_TARGET
        met &= ok
        print(f"  {code:<8} triaged {judged:>4}  false {verdicts['false']:>3}  {_pct(share):>6}  "
              f"{'ok' if ok else 'MISSED' if judged else 'untriaged'}")

    # A finding on operands whose dtype the source does not show claims a condition ("if they are
    # float32 ..."), not a fact: the two kinds' false shares, apart.
    by_dtype: dict[tuple[str, bool], Counter] = defaultdict(Counter)
    for project in projects:
        name = project["name"]
        for f in runs[name][0]:
            known = (f.evidence or {}).get("dtype_known")
            if not f.informational and known is not None and key(name, f) in triage:
                by_dtype[(f.code, known)][triage[key(name, f)]["verdict"]] += 1
    if by_dtype:
        print("\nby whether the finding saw its operands' dtype (evidence `dtype_known`)")
    for (code, known), verdicts in sorted(by_dtype.items()):
        judged = sum(verdicts.values())
        print(f"  {code:<8} {'dtype shown' if known else 'dtype unknown':<14} triaged {judged:>4}  "
              f"false {verdicts['false']:>3}  {_pct(verdicts['false'] / judged):>6}")

    print("\nper clause, as each file's profile shows it (library files: `library`, whose notes claim a count, "
          "not a fact)")
    shown_by_clause: dict[str, Counter] = defaultdict(Counter)
    for project in projects:
        name = project["name"]
        findings, profiles, _ = runs[name]
        for f in apply_profiles(findings, load_config(isolated=True), profiles):
            if not f.informational and key(name, f) in triage:
                shown_by_clause[f.code][triage[key(name, f)]["verdict"]] += 1
    for code, verdicts in sorted(shown_by_clause.items()):
        judged = sum(verdicts.values())
        print(f"  {code:<8} triaged {judged:>4}  false {verdicts['false']:>3}  "
              f"{_pct(verdicts['false'] / judged):>6}")

    print(f"\nper project: errors under each file's profile (target: ≥ {LIBRARY_TRUE_TARGET:.0%} of library errors true)"
          "; CPU time per file")
    for project in projects:
        name = project["name"]
        findings, profiles, times = runs[name]
        shown = apply_profiles(findings, load_config(isolated=True), profiles)
        errors = {key(name, f) for f in shown if str(f.severity) == "error" and not f.code.startswith("KAN")}
        library_errors = {k for k in errors if profiles.get(k[1]) == LIBRARY}
        judged = [triage[k]["verdict"] for k in library_errors if k in triage]
        share = judged.count("true") / len(judged) if judged else None
        if library_errors:
            met &= share is not None and share >= LIBRARY_TRUE_TARGET
        seconds = sorted(t for _, t, _ in times)
        slowest = max(times, key=lambda item: item[1]) if times else ("-", 0.0, None)
        met &= slowest[1] <= FILE_TARGET_S
        notes = sum(1 for f in shown if f.informational)
        print(f"  {name:<15} files {len(times):>4}  errors {len(errors):>5} (library {len(library_errors):>4}, "
              f"triaged {len(judged):>3}, true {_pct(share):>6})  notes {notes:>4}  "
              f"p50 {_quantile(seconds, 0.5):.3f} s  p99 {_quantile(seconds, 0.99):.3f} s  "
              f"max {slowest[1]:.2f} s ({slowest[0]})")
        proved = [(path, t, p) for path, t, p in times if p is not None]
        if proved:
            total, total_proofs = sum(t for _, t, _ in proved), sum(p for _, _, p in proved)
            worst = max(proved, key=lambda item: item[2])
            print(f"  {'':<15} with the MEM003/MEM004 proofs: {total_proofs:.1f} s against {total:.1f} s "
                  f"({total_proofs / max(total, 1e-9):.1f}×); slowest file {worst[2]:.2f} s ({worst[0]})")
    stale = [k for k in triage if k[0] in runs and k not in {key(k[0], f) for f in runs[k[0]][0]}]
    if stale:
        print(f"\n{len(stale)} triage entries match no finding any more (fixed, or moved): e.g. {stale[:3]}")
    print(f"\nevery target met: {'yes' if met else 'no'}")
    return met


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{share:.0%}"


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[min(98, max(0, round(q * 100) - 1))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                        / "kanalyze" / "ecosystem", help="where projects are fetched (default: ~/.cache/kanalyze/ecosystem)")
    parser.add_argument("--mirror", type=Path, help="a folder of bare git mirrors (<owner>+<name>/repo) to read from")
    parser.add_argument("--only", help="comma-separated project names")
    parser.add_argument("--sample", metavar="CODE", help="print untriaged findings of CODE to judge, as JSON lines")
    parser.add_argument("--per", type=int, default=8, help="with --sample: findings per project to reach (default 8)")
    parser.add_argument("--proofs", action="store_true",
                        help="also check each file with the opt-in MEM003/MEM004 proofs, and print what they cost")
    parser.add_argument("--json", type=Path, help="also write every finding, with its triage, to this file")
    args = parser.parse_args(argv)

    projects = json.loads((HERE / "projects.json").read_text())
    if args.only:
        wanted = set(args.only.split(","))
        projects = [p for p in projects if p["name"] in wanted]
    runs = {}
    for project in projects:
        root = materialise(project, args.cache, args.mirror)
        runs[project["name"]] = check_project(project, root, proofs=args.proofs)
    triage = load_triage()
    if args.sample:
        sample(runs, triage, args.sample.upper(), args.per)
        return 0
    if args.json:
        rows = [dict(f.to_dict(), project=name, triage=triage.get(key(name, f)))
                for name, (findings, _, _) in runs.items() for f in findings]
        args.json.write_text(json.dumps(rows, indent=1))
    return 0 if report(projects, runs, triage) else 1


if __name__ == "__main__":
    sys.exit(main())
