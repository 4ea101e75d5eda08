#!/usr/bin/env python3
"""Materialise the development corpus: real LLM-written KernelBench solutions, each
beside the KernelBench problem it solves, at KernelBench's problem sizes (main).

No third-party file lives in this repository.  corpus.lock.json (next to this
script) names every pair: the public repository and pinned commit a candidate
comes from, its path there and its sha256, and the KernelBench problem (level,
number, file) it is paired with.  This script fetches exactly those files:

    python bench/corpus/fetch_corpus.py OUT                      # over https (raw.githubusercontent.com)
    python bench/corpus/fetch_corpus.py OUT --git                # over https, `git fetch --depth 1 <commit>`
    python bench/corpus/fetch_corpus.py OUT --from-mirror DIR    # from bare git mirrors, no network

DIR holds one bare git directory per repository, as `fetch` leaves them:
DIR/<owner>+<name>/repo (or .../repo/.git).  OUT receives

    OUT/problems/level<L>/<N>_<Name>.py                     KernelBench main at the pinned commit
    OUT/candidates/<source>/<model>/level<L>_<N>_<Name>.py  one file per pair
    OUT/pairs.jsonl                                          one line per pair
    OUT/check.json                                           what --check found (on by default)

Paths in pairs.jsonl are relative to OUT unless --absolute.

    python bench/corpus/fetch_corpus.py OUT --from-mirror DIR --relock

re-runs the discovery (the pairing rules and the selection below) on the sources
and rewrites corpus.lock.json; `--stats` prints the pools and what was dropped.
--relock over the network needs --git (discovery lists trees).

KernelBench's branch `sokserey/tritonDump` is held out for acceptance
measurements: nothing here reads it.  Problems come from one commit of
refs/heads/main, and with --from-mirror the script checks that this commit is
reachable from refs/heads/main before it reads anything.
"""

from __future__ import annotations

import argparse
import ast
import collections
import concurrent.futures
import csv
import hashlib
import io
import json
import re
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOCK = HERE / "corpus.lock.json"

KERNELBENCH = {
    "repo": "ScalingIntelligence/KernelBench",
    "ref": "refs/heads/main",
    "commit": "423217d9fda91e0c2d67e4a43bf62f96f6d104f1",
    "license": "MIT",
}
HELD_OUT = "ScalingIntelligence/KernelBench branch sokserey/tritonDump (never read)"

# Every source, its pinned commit and its license as the repository states it.
SOURCES = {
    "adityakotha03/tritonLLM": {
        "commit": "0e70fe59d07bd0f419ae116e53e9c8e3f3165706",
        "license": "none stated (no LICENSE file)",
        "what": "TritonLLM: zero-shot Triton generations for all of KernelBench L1-L3 by "
        "Qwen3-30B-A3B-Instruct-2507 and a fine-tuned Qwen3-4B-Instruct-2507, plus GPT-5 / "
        "Gemini-2.5-pro zero-shot and GPT-5 search outputs on 10 problems; A100 results CSVs.",
    },
    "Alisehen/LLMKernel": {
        "commit": "d078a38dfe4b331d7fc71ee22a9f013bf151bb73",
        "license": "MIT",
        "what": "LLMKernel (a CudaForge-style multi-agent loop, Triton backend): per-problem "
        "rounds of DeepSeek-written Triton kernels for KernelBench L1-L3 with an eval JSON per round.",
    },
    "anneouyang/KernelBenchLeaderboard": {
        "commit": "170ca7965f53bba599d1078b6fcaa5dd2658ec50",
        "license": "none stated (no LICENSE file)",
        "what": "The KernelBench paper's leaderboard dump (Dec 2024): correct load_inline CUDA "
        "solutions by gpt-o1, claude-3.5-sonnet, deepseek-coder, gpt-4o, llama-3.1-405b/70b, "
        "gemini-1.5-flash, written against KernelBench's original (pre-July-2025) problem sizes.",
    },
    "sekstini/CUDA-L1": {
        "commit": "69eb9e36d593eb1ea7ea69845818936684269ca8",
        "license": "GPL-3.0",
        "what": "A fork of deepreinforce-ai/CUDA-L1 whose unpack_json.py unpacked the CUDA-L1 "
        "model's optimized KernelBench codes (optimized_cuda_code/*.json) into "
        "unpacked/<gpu>/<level>/<task>/custom_code.py; only load_inline ones are used.",
    },
    "j1mk1m/Kernel-Coder": {
        "commit": "5b02b31b91704b607f1e26632322a324dad3721b",
        "license": "none stated (no LICENSE file)",
        "what": "Kernel-Coder runs (commit 'upload runs'): QwQ-32B best-of-8 (evolrule) and "
        "Qwen2.5-Coder-7B-Instruct (base) load_inline CUDA for KernelBench L1-L2, with eval_results.json.",
    },
}

# Per (source, model) group: how many pairs the corpus takes, spread evenly over
# the group's problems in (level, number) order.  None: all.
CAPS = {
    ("adityakotha03/tritonLLM", "Qwen3-30B-A3B-Instruct-2507"): 45,
    ("adityakotha03/tritonLLM", "Qwen3-4B-Instruct-2507 (fine-tuned)"): 25,
    ("adityakotha03/tritonLLM", "GPT-5"): None,
    ("adityakotha03/tritonLLM", "GPT-5 (search)"): None,
    ("adityakotha03/tritonLLM", "Gemini-2.5-pro"): None,
    ("Alisehen/LLMKernel", "DeepSeek"): 60,
    ("anneouyang/KernelBenchLeaderboard", "*"): 8,
    ("sekstini/CUDA-L1", "CUDA-L1"): 20,
    ("j1mk1m/Kernel-Coder", "QwQ-32B"): 15,
    ("j1mk1m/Kernel-Coder", "Qwen2.5-Coder-7B-Instruct"): 10,
}

UA = "kanalyze-corpus-fetch/1"


# --------------------------------------------------------------------------- readers


class GitDirRepo:
    """One commit of a bare git directory: list and read files (git cat-file --batch)."""

    def __init__(self, git_dir: Path, commit: str, repo: str):
        self.git_dir, self.commit, self.repo = Path(git_dir), commit, repo
        self._proc = None
        if subprocess.run(self._git("cat-file", "-e", f"{commit}^{{commit}}"), capture_output=True).returncode:
            raise SystemExit(f"{repo}: commit {commit} is not in {git_dir}")

    def _git(self, *args: str) -> list[str]:
        return ["git", f"--git-dir={self.git_dir}", *args]

    def list(self, prefix: str = "") -> list[str]:
        out = subprocess.run(self._git("ls-tree", "-r", "-z", "--name-only", self.commit, "--", prefix),
                             capture_output=True, check=True).stdout
        return [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]

    def read(self, path: str) -> bytes:
        if self._proc is None:
            self._proc = subprocess.Popen(self._git("cat-file", "--batch"), stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE)
        self._proc.stdin.write(f"{self.commit}:{path}\n".encode())
        self._proc.stdin.flush()
        header = self._proc.stdout.readline().decode()
        if header.rstrip().endswith("missing") or len(header.split()) != 3:
            raise FileNotFoundError(f"{self.repo}@{self.commit[:10]}:{path}")
        size = int(header.split()[2])
        data = self._proc.stdout.read(size)
        self._proc.stdout.read(1)
        return data

    def text(self, path: str) -> str:
        return self.read(path).decode("utf-8", "replace")

    def close(self):
        if self._proc is not None:
            self._proc.stdin.close()
            self._proc.wait()
            self._proc = None


class RawRepo:
    """One commit of a GitHub repository over https (raw.githubusercontent.com); no listing."""

    def __init__(self, repo: str, commit: str, base: str = "https://raw.githubusercontent.com"):
        self.repo, self.commit, self.base = repo, commit, base.rstrip("/")

    def list(self, prefix: str = "") -> list[str]:
        raise SystemExit("listing a tree needs --git or --from-mirror")

    def read(self, path: str) -> bytes:
        url = f"{self.base}/{self.repo}/{self.commit}/{urllib.parse.quote(path)}"
        for attempt in range(4):
            try:
                with urllib.request.urlopen(urllib.request.Request(url, headers={"User-Agent": UA}), timeout=60) as r:
                    return r.read()
            except urllib.error.HTTPError as e:
                if e.code == 404:
                    raise FileNotFoundError(url) from e
                if attempt == 3:
                    raise
            except OSError:
                if attempt == 3:
                    raise
            time.sleep(2 ** attempt)
        raise AssertionError

    def text(self, path: str) -> str:
        return self.read(path).decode("utf-8", "replace")

    def close(self):
        pass


def mirror_git_dir(mirror: Path, repo: str) -> Path:
    base = mirror / repo.replace("/", "+")
    for cand in (base / "repo" / ".git", base / "repo", base):
        if (cand / "HEAD").is_file() and (cand / "objects").is_dir():
            return cand
    raise SystemExit(f"no mirror of {repo} under {mirror} (looked for {base}/repo)")


def git_fetch_repo(cache: Path, repo: str, commit: str, base: str = "https://github.com") -> Path:
    """A bare repository holding `commit` of github.com/<repo>, fetched shallowly over https."""
    git_dir = cache / repo.replace("/", "+")
    if not (git_dir / "HEAD").is_file():
        subprocess.run(["git", "init", "--quiet", "--bare", str(git_dir)], check=True)
    have = subprocess.run(["git", f"--git-dir={git_dir}", "cat-file", "-e", f"{commit}^{{commit}}"],
                          capture_output=True).returncode == 0
    if not have:
        subprocess.run(["git", f"--git-dir={git_dir}", "fetch", "--quiet", "--depth", "1", "--no-tags",
                        f"{base.rstrip('/')}/{repo}.git", commit], check=True)
    return git_dir


class Readers:
    """Hands out a reader per (repo, commit) for the chosen transport."""

    def __init__(self, mode: str, mirror: Path | None = None, cache: Path | None = None,
                 base: str | None = None):
        self.mode, self.mirror, self.cache, self.base = mode, mirror, cache, base
        self._open: dict[tuple[str, str], object] = {}

    def get(self, repo: str, commit: str):
        key = (repo, commit)
        if key not in self._open:
            if self.mode == "mirror":
                git_dir = mirror_git_dir(self.mirror, repo)
                if repo == KERNELBENCH["repo"]:
                    check_not_held_out(git_dir, commit)
                self._open[key] = GitDirRepo(git_dir, commit, repo)
            elif self.mode == "git":
                self._open[key] = GitDirRepo(git_fetch_repo(self.cache, repo, commit,
                                                            self.base or "https://github.com"), commit, repo)
            else:
                self._open[key] = RawRepo(repo, commit, self.base or "https://raw.githubusercontent.com")
        return self._open[key]

    def close(self):
        for r in self._open.values():
            r.close()


def check_not_held_out(git_dir: Path, commit: str) -> None:
    """KernelBench's problems come from main only: the pinned commit must be on refs/heads/main."""
    ref = KERNELBENCH["ref"]
    ok = subprocess.run(["git", f"--git-dir={git_dir}", "merge-base", "--is-ancestor", commit, ref],
                        capture_output=True).returncode == 0
    if not ok:
        raise SystemExit(f"KernelBench commit {commit} is not reachable from {ref} in {git_dir}")


# --------------------------------------------------------------------------- python facts


def parse(text: str):
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


def top_level(tree, kind, name):
    return next((n for n in tree.body if isinstance(n, kind) and n.name == name), None) if tree else None


def method(cls, name):
    return next((n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name),
                None) if cls else None


def _strip_docstrings(node):
    for n in ast.walk(node):
        if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body:
            first = n.body[0]
            if isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant) \
                    and isinstance(first.value.value, str):
                n.body = n.body[1:] or [ast.Pass()]
    return node


def model_class_key(text: str) -> str | None:
    """The problem's `class Model`, docstrings and comments aside, as a comparable string."""
    tree = parse(text)
    cls = top_level(tree, ast.ClassDef, "Model")
    return ast.dump(_strip_docstrings(cls), include_attributes=False) if cls else None


def forward_key(text: str) -> str | None:
    tree = parse(text)
    fwd = method(top_level(tree, ast.ClassDef, "Model"), "forward")
    return ast.dump(_strip_docstrings(fwd), include_attributes=False) if fwd else None


def returned_list_len(fn) -> int | None:
    """len of `return [a, b, ...]` when every return of fn returns a plain list/tuple literal."""
    if fn is None:
        return None
    lens = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.Return):
            v = n.value
            if isinstance(v, (ast.List, ast.Tuple)) and not any(isinstance(e, ast.Starred) for e in v.elts):
                lens.add(len(v.elts))
            else:
                return None
    return lens.pop() if len(lens) == 1 else None


def arity(fn) -> tuple[int, float] | None:
    """(required, maximum) positional arguments of a method, self excluded."""
    if fn is None:
        return None
    a = fn.args
    pos = a.posonlyargs + a.args
    n = max(len(pos) - 1, 0)
    required = max(n - len(a.defaults), 0)
    return required, (float("inf") if a.vararg else n)


TRITON_RE = re.compile(r"@\s*triton\.(jit|autotune|heuristics)\b|@\s*(jit)\s*\n\s*def\b")
CUDA_RE = re.compile(r"\b__global__\b")


def language_of(text: str) -> str | None:
    if TRITON_RE.search(text) and "triton" in text:
        return "triton"
    if "load_inline" in text and CUDA_RE.search(text):
        return "cuda"
    return None


def candidate_problems(text: str, tree) -> list[str]:
    """Why a candidate cannot stand for its problem, or []."""
    if tree is None:
        return ["does not parse"]
    if top_level(tree, ast.ClassDef, "ModelNew") is None:
        if any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in ast.walk(tree)):
            return ["ModelNew is not defined at module level"]
        return ["defines no ModelNew"]
    if language_of(text) is None:
        return ["no custom kernel (no @triton.jit, no load_inline CUDA)"]
    return []


def signature_problems(cand_tree, prob_tree) -> list[str]:
    """ModelNew's __init__/forward against the problem's get_init_inputs/get_inputs literals."""
    out = []
    new = top_level(cand_tree, ast.ClassDef, "ModelNew")
    for meth, getter in (("__init__", "get_init_inputs"), ("forward", "get_inputs")):
        n = returned_list_len(top_level(prob_tree, ast.FunctionDef, getter))
        ar = arity(method(new, meth))
        if n is None or ar is None:
            continue
        if meth == "__init__" and any(isinstance(b, ast.Name) and b.id == "Model" for b in new.bases):
            continue
        if not ar[0] <= n <= ar[1]:
            out.append(f"ModelNew.{meth} takes {ar[0]}..{ar[1]} arguments, {getter}() gives {n}")
    return out


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", s).strip("-").lower()


def norm_name(stem: str) -> str:
    return re.sub(r"_+$", "", stem).lower()


# --------------------------------------------------------------------------- KernelBench index


class KernelBench:
    def __init__(self, reader):
        self.reader = reader
        self.files: dict[tuple[int, int], str] = {}
        self.by_name: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
        for path in reader.list("KernelBench/"):
            m = re.fullmatch(r"KernelBench/level([123])/(\d+)_(.+)\.py", path)
            if m:
                key = (int(m[1]), int(m[2]))
                self.files[key] = path
                self.by_name[norm_name(f"{m[2]}_{m[3]}")].append(key)
        self._text: dict[tuple[int, int], str] = {}

    def text(self, key) -> str:
        if key not in self._text:
            self._text[key] = self.reader.text(self.files[key])
        return self._text[key]

    def stem(self, key) -> str:
        return Path(self.files[key]).stem

    def resolve(self, level: int | None, number: int, name: str | None) -> tuple[tuple[int, int] | None, str]:
        """The problem a source names, by level and number and, where given, its name."""
        if level is None:
            hits = [k for k in self.by_name.get(norm_name(f"{number}_{name}"), [])]
            if len(hits) != 1:
                return None, f"name {number}_{name} matches {len(hits)} KernelBench problems"
            return hits[0], "by name (source gives no level)"
        key = (level, number)
        if key not in self.files:
            return None, f"KernelBench main has no level {level} problem {number}"
        if name is not None and norm_name(self.stem(key)) != norm_name(f"{number}_{name}"):
            return None, f"level {level} problem {number} is {self.stem(key)} in main, the source says {number}_{name}"
        return key, "by level and number" + (" and name" if name is not None else "")


# --------------------------------------------------------------------------- discovery


@dataclass
class Found:
    source: str
    path: str
    model: str
    level: int | None
    number: int
    name: str | None
    reported: dict = field(default_factory=dict)
    source_problem: str | None = None  # the source's own copy of the problem, to compare the Model class
    rank: tuple = ()  # smaller is preferred among variants of one (source, model, problem)


def _csv_results(text: str) -> dict[str, dict]:
    out = {}
    for row in csv.DictReader(io.StringIO(text)):
        def b(v):
            return {"True": True, "False": False}.get(v)
        out[row["Problem"]] = {"compiled": b(row.get("Compiled")), "correct": b(row.get("Correctness")),
                               "status": row.get("Status")}
    return out


def discover_tritonllm(r) -> list[Found]:
    models = {"qwen3_30b": "Qwen3-30B-A3B-Instruct-2507",
              "qwen3_4b_finetuned": "Qwen3-4B-Instruct-2507 (fine-tuned)",
              "gpt-5": "GPT-5", "gemini-2.5-pro": "Gemini-2.5-pro"}
    results = {}
    for key, csv_path in (("qwen3_30b", "results/zeroshot_qwen3_30b.csv"),
                          ("qwen3_4b_finetuned", "results/zeroshot_qwen3_4b_finetuned.csv"),
                          ("gpt-5", "results/zeroshot_gpt-5.csv"),
                          ("gemini-2.5-pro", "results/zeroshot_gemini-2.5-pro.csv"),
                          ("search", "results/search_openai-gpt-5.csv")):
        results[key] = _csv_results(r.text(csv_path))
    out = []
    for path in r.list("output/"):
        m = re.fullmatch(r"output/zeroshot/(qwen3_30b|qwen3_4b_finetuned)/level([123])/(\d+)_(.+)\.py", path)
        if m:
            level, number, name, mk, res_key = int(m[2]), int(m[3]), m[4], m[1], m[1]
        else:
            m = re.fullmatch(r"output/(zeroshot/(gpt-5|gemini-2\.5-pro)|search/openai-gpt-5)/(\d+)_(.+)\.py", path)
            if not m:
                continue
            level, number, name = None, int(m[3]), m[4]
            mk = m[2] or "search"
            res_key = mk
        model = models.get(mk, "GPT-5 (search)")
        stem = f"{number}_{name}"
        rep = next((v for k, v in results.get(res_key, {}).items() if norm_name(k) == norm_name(stem)), {})
        # the repository's own KernelBench copy; filled in once the problem is resolved
        out.append(Found("adityakotha03/tritonLLM", path, model, level, number, name, rep,
                         "KernelBench/level{level}/{kbstem}.py"))
    return out


def discover_llmkernel(r) -> list[Found]:
    kernels = collections.defaultdict(list)
    evals = collections.defaultdict(list)
    for path in r.list("results/"):
        m = re.fullmatch(r"results/level([123])/((\d+)_([^/]+))/code/kernel_(\d{8}_\d{6})\.py", path)
        if m:
            kernels[(int(m[1]), m[2])].append((m[5], path))
            continue
        m = re.fullmatch(r"results/level([123])/([^/]+)/evaluation/eval_\d+\.json", path)
        if m:
            evals[(int(m[1]), m[2])].append(path)
    out = []
    for (level, stem), ks in sorted(kernels.items()):
        runnable, models = {}, collections.Counter()
        for ep in evals.get((level, stem), []):
            try:
                d = json.loads(r.read(ep))
            except ValueError:
                continue
            cf = d.get("candidate_file") or ""
            run = re.search(r"/run/([^/]+)/", cf) or re.search(r"/run/([^/]+)/", d.get("message", ""))
            if run:
                models[run[1].rsplit("_", 1)[-1]] += 1
            if cf:
                runnable[Path(cf).name] = str(d.get("runnable")) == "True"
        model = "DeepSeek" if (not models or models.most_common(1)[0][0] == "deepseek") else models.most_common(1)[0][0]
        number, name = stem.split("_", 1)
        for stamp, path in ks:
            ok = runnable.get(Path(path).name)
            rep = {"runnable": ok, "phase_file": Path(path).name}
            # the last runnable round first, then the last round
            rank = (0 if ok else 1, -int(stamp.replace("_", "")))
            out.append(Found("Alisehen/LLMKernel", path, model, level, int(number), name, rep,
                             f"KernelBench/level{level}/{stem}.py", rank=rank))
    return out


def discover_leaderboard(r) -> list[Found]:
    data = json.loads(r.read("docs/assets/data.json"))
    out = []
    for key, entries in data.items():
        m = re.fullmatch(r"Level (\d): (\d+)_(.+)", key)
        if not m:
            continue
        level, number, name = int(m[1]), int(m[2]), m[3]
        for e in entries:
            rep = {"correct": True, "torch_speedup": round(float(e["torch_speedup"]), 4),
                   "note": "leaderboard entries are correct on KernelBench's Dec-2024 problem sizes"}
            out.append(Found("anneouyang/KernelBenchLeaderboard", f"docs/assets/solutions/{e['file']}.py",
                             e["display_name"], level, number, name, rep,
                             f"docs/assets/problems/l{level}_p{number}.py"))
    return out


def discover_cuda_l1(r) -> list[Found]:
    out = []
    for path in r.list("unpacked/h100_xsm/"):
        m = re.fullmatch(r"unpacked/h100_xsm/([123])/(\d+)/custom_code\.py", path)
        if m:
            out.append(Found("sekstini/CUDA-L1", path, "CUDA-L1", int(m[1]), int(m[2]), None, {},
                             str(Path(path).with_name("ref_code.py"))))
    return out


def _architecture_from_prompt(text: str) -> str | None:
    i = text.rfind("You are given the following architecture")
    if i < 0:
        return None
    m = re.search(r"```(?:python)?\n(.*?)```", text[i:], re.S)
    return m[1] if m else None


def discover_kernel_coder(r) -> list[Found]:
    runs = {"QwQ-32B": ["runs/evolrule_parallel_8_batch_level1", "runs/evolrule_parallel_8_batch_level2"],
            "Qwen2.5-Coder-7B-Instruct": ["runs/test_time_scaling_base_Qwen2.5-Coder-7B-Instruct_level1",
                                          "runs/test_time_scaling_base_Qwen2.5-Coder-7B-Instruct_level2"]}
    prompts: dict[tuple[int, int], str] = {}
    listing = {run: r.list(run + "/") for rs in runs.values() for run in rs}
    for run, paths in listing.items():
        for p in paths:
            m = re.search(r"/level_(\d)_problem_(\d+)_.*_prompt\.txt$", p)
            if m and (int(m[1]), int(m[2])) not in prompts:
                prompts[(int(m[1]), int(m[2]))] = p
    out = []
    for model, rs in runs.items():
        for run in rs:
            cfg = r.text(f"{run}/config.yaml")
            named = re.search(r"^model_name:\s*(\S+)", cfg, re.M)
            assert named and named[1].rsplit("/", 1)[-1] == model, (run, named)
            status = {}
            for e in json.loads(r.read(f"{run}/eval_results.json")):
                status[e["solution_id"]] = {"compiled": e.get("compiled"), "correct": e.get("correctness")}
            for p in listing[run]:
                m = re.search(r"/(level_(\d)_problem_(\d+)_(?:epoch_\d+_sample|solution)_(\d+))_kernel\.py$", p)
                if not m:
                    continue
                level, number, sample = int(m[2]), int(m[3]), int(m[4])
                rep = status.get(m[1], {})
                rank = (0 if rep.get("correct") else 1 if rep.get("compiled") else 2, sample)
                out.append(Found("j1mk1m/Kernel-Coder", p, model, level, number, None, rep,
                                 prompts.get((level, number)), rank=rank))
    return out


DISCOVER = {
    "adityakotha03/tritonLLM": discover_tritonllm,
    "Alisehen/LLMKernel": discover_llmkernel,
    "anneouyang/KernelBenchLeaderboard": discover_leaderboard,
    "sekstini/CUDA-L1": discover_cuda_l1,
    "j1mk1m/Kernel-Coder": discover_kernel_coder,
}


def spread(items: list, k: int | None) -> list:
    if k is None or len(items) <= k:
        return items
    n = len(items)
    return [items[(i * n) // k] for i in range(k)]


def relock(readers: Readers, stats: bool) -> dict:
    kb = KernelBench(readers.get(KERNELBENCH["repo"], KERNELBENCH["commit"]))
    dropped = collections.Counter()
    drop_examples = collections.defaultdict(list)
    pool = collections.Counter()
    eligible = collections.defaultdict(list)  # (source, model, key) -> [(rank, Found, text, language, notes)]
    seen_hash: dict[str, str] = {}

    def drop(f: Found, reason: str, detail: str | None = None):
        dropped[(f.source, reason)] += 1
        if len(drop_examples[(f.source, reason)]) < 3:
            drop_examples[(f.source, reason)].append(f"{f.path}" + (f": {detail}" if detail else ""))

    for source, meta in SOURCES.items():
        r = readers.get(source, meta["commit"])
        found = DISCOVER[source](r)
        for f in found:
            pool[(source, f.model)] += 1
            key, how = kb.resolve(f.level, f.number, f.name)
            if key is None:
                drop(f, "pairing: no KernelBench main problem with this level, number and name", how)
                continue
            text = r.text(f.path)
            tree = parse(text)
            why = candidate_problems(text, tree)
            if why:
                drop(f, "candidate: " + why[0])
                continue
            prob_text = kb.text(key)
            prob_tree = parse(prob_text)
            # the source's own copy of the problem: same Model class as KernelBench main?
            pairing = {"rule": how}
            if f.source_problem:
                f.source_problem = f.source_problem.replace("{level}", str(key[0])).replace("{kbstem}", kb.stem(key))
                try:
                    own = r.text(f.source_problem)
                except FileNotFoundError:
                    own = None
                if f.source.endswith("Kernel-Coder") and own is not None:
                    own = _architecture_from_prompt(own)
                if own is None:
                    pairing["model_class"] = "unknown (no copy of the problem in the source)"
                elif model_class_key(own) == model_class_key(prob_text):
                    pairing["model_class"] = "same as main"
                    pairing["same_file_as_main"] = own.strip() == prob_text.strip()
                elif forward_key(own) is not None and forward_key(own) == forward_key(prob_text):
                    pairing["model_class"] = "forward same as main, __init__ differs"
                    pairing["same_file_as_main"] = False
                else:
                    drop(f, "pairing: the source's copy of the problem defines another Model than KernelBench main")
                    continue
                pairing["source_problem"] = f.source_problem
            else:
                pairing["model_class"] = "unknown (no copy of the problem in the source)"
            sig = signature_problems(tree, prob_tree)
            if sig:
                drop(f, "signature: ModelNew's __init__/forward arity does not fit the problem's inputs", sig[0])
                continue
            h = sha256(r.read(f.path))
            eligible[(source, f.model, key)].append((f.rank, f, h, language_of(text), pairing))

    # one variant per (source, model, problem), then the caps, then no duplicate contents
    groups = collections.defaultdict(list)
    for (source, model, key), variants in eligible.items():
        variants.sort(key=lambda v: (v[0], v[1].path))
        groups[(source, model)].append((key, variants))
    pairs = []
    for (source, model), items in sorted(groups.items()):
        items.sort(key=lambda kv: kv[0])
        cap = CAPS.get((source, model), CAPS.get((source, "*"), 0))
        kept = 0
        for key, variants in spread(items, cap) if cap is not None else items:
            for rank, f, h, lang, pairing in variants:
                if h in seen_hash:
                    drop(f, "duplicate content", seen_hash[h])
                    continue
                seen_hash[h] = f"{source}:{f.path}"
                level, number = key
                pairs.append({
                    "source": source, "commit": SOURCES[source]["commit"], "candidate_path": f.path,
                    "candidate_sha256": h, "model": model, "language": lang,
                    "level": level, "problem_id": number, "problem_path": kb.files[key],
                    "reported": {k: v for k, v in f.reported.items() if k != "phase_file"},
                    "pairing": pairing,
                })
                kept += 1
                break
    pairs.sort(key=lambda p: (p["language"] != "triton", p["source"], p["model"], p["level"], p["problem_id"]))
    problems = {}
    for p in pairs:
        problems[p["problem_path"]] = sha256(kb.reader.read(p["problem_path"]))
    lock = {
        "about": "bench/corpus: real LLM-written KernelBench solutions paired with KernelBench problems; "
                 "fetch_corpus.py materialises them.  No third-party file is stored in this repository.",
        "held_out": HELD_OUT,
        "kernelbench": dict(KERNELBENCH, problems=dict(sorted(problems.items()))),
        "sources": {s: {"commit": m["commit"], "license": m["license"], "url": f"https://github.com/{s}",
                        "what": m["what"]} for s, m in SOURCES.items()},
        "selection": {"caps_per_source_model": {f"{s} / {m}": c for (s, m), c in CAPS.items()},
                      "rule": "per (source, model) one candidate per problem (the preferred variant: reported "
                              "correct/runnable first, then compiled, then the latest round or the lowest sample); "
                              "groups are thinned evenly over (level, number) to the cap; identical contents kept once"},
        "pairs": pairs,
    }
    report = {
        "pool": {f"{s} / {m}": n for (s, m), n in sorted(pool.items())},
        "dropped": {f"{s}: {why}": n for (s, why), n in sorted(dropped.items())},
        "drop_examples": {f"{s}: {why}": ex for (s, why), ex in sorted(drop_examples.items())},
        "eligible_problems": {f"{s} / {m}": len(v) for (s, m), v in sorted(groups.items())},
    }
    lock["discovery"] = {"pool": report["pool"], "eligible_problems": report["eligible_problems"],
                         "dropped": report["dropped"]}
    if stats:
        print(json.dumps(report, indent=1))
    return lock


def dump_lock(lock: dict) -> str:
    """The lock as JSON, one pair a line, so that a diff shows which pairs changed."""
    head = {k: v for k, v in lock.items() if k != "pairs"}
    text = json.dumps(head, indent=1)[:-2]
    rows = ",\n  ".join(json.dumps(p, separators=(",", ":")) for p in lock["pairs"])
    return text + ',\n "pairs": [\n  ' + rows + "\n ]\n}\n"


# --------------------------------------------------------------------------- build + check


def out_name(p: dict, problem_stem: str, taken: set) -> str:
    base = f"candidates/{slug(p['source'].split('/')[1])}/{slug(p['model'])}/level{p['level']}_{problem_stem}"
    name, i = base + ".py", 2
    while name in taken:
        name, i = f"{base}_{i}.py", i + 1
    taken.add(name)
    return name


def build(lock: dict, readers: Readers, out: Path, absolute: bool, jobs: int) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    kb_commit = lock["kernelbench"]["commit"]
    kb_reader = readers.get(lock["kernelbench"]["repo"], kb_commit)
    jobs_list = [("kb", kb_reader, path, sha) for path, sha in lock["kernelbench"]["problems"].items()]
    for i, p in enumerate(lock["pairs"]):
        jobs_list.append((i, readers.get(p["source"], p["commit"]), p["candidate_path"], p["candidate_sha256"]))

    def fetch(job):
        tag, reader, path, want = job
        data = reader.read(path)
        got = sha256(data)
        if got != want:
            raise SystemExit(f"{path}: sha256 {got} is not the locked {want}")
        return tag, path, data

    blobs: dict = {}
    if isinstance(kb_reader, RawRepo):
        with concurrent.futures.ThreadPoolExecutor(jobs) as ex:
            for tag, path, data in ex.map(fetch, jobs_list):
                blobs[(tag, path)] = data
    else:
        for job in jobs_list:
            tag, path, data = fetch(job)
            blobs[(tag, path)] = data
    for path in lock["kernelbench"]["problems"]:
        dest = out / "problems" / Path(path).relative_to("KernelBench")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(blobs[("kb", path)])
    taken: set = set()
    lines = []
    for i, p in enumerate(lock["pairs"]):
        stem = Path(p["problem_path"]).stem
        rel = out_name(p, stem, taken)
        dest = out / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(blobs[(i, p["candidate_path"])])
        prob = out / "problems" / Path(p["problem_path"]).relative_to("KernelBench")
        cand = dest
        lines.append({
            "candidate": str(cand if absolute else cand.relative_to(out)),
            "problem": str(prob if absolute else prob.relative_to(out)),
            "level": p["level"], "problem_id": p["problem_id"], "source": p["source"], "commit": p["commit"],
            "model": p["model"], "language": p["language"],
            "source_path": p["candidate_path"], "license": lock["sources"][p["source"]]["license"],
            "kernelbench_commit": kb_commit, "reported": p["reported"],
            "problem_same_file_as_source": p["pairing"].get("same_file_as_main"),
        })
    with open(out / "pairs.jsonl", "w", encoding="utf-8") as fh:
        for line in lines:
            fh.write(json.dumps(line) + "\n")
    return lines


def check(out: Path) -> dict:
    """Every line's files exist; candidates parse and define ModelNew; problems define the three names."""
    bad = collections.Counter()
    examples = collections.defaultdict(list)
    counts = collections.Counter()
    by = collections.defaultdict(collections.Counter)
    seen = collections.Counter()
    lines = [json.loads(s) for s in (out / "pairs.jsonl").read_text(encoding="utf-8").splitlines() if s.strip()]
    for ln in lines:
        problems = []
        cand, prob = Path(ln["candidate"]), Path(ln["problem"])
        cand, prob = (cand if cand.is_absolute() else out / cand), (prob if prob.is_absolute() else out / prob)
        if not cand.is_file():
            problems.append("candidate file missing")
        if not prob.is_file():
            problems.append("problem file missing")
        if not problems:
            ct, pt = cand.read_text(encoding="utf-8"), prob.read_text(encoding="utf-8")
            seen[sha256(ct.encode())] += 1
            ctree, ptree = parse(ct), parse(pt)
            if ctree is None:
                problems.append("candidate does not parse")
            elif top_level(ctree, ast.ClassDef, "ModelNew") is None:
                problems.append("candidate defines no ModelNew")
            elif language_of(ct) != ln["language"]:
                problems.append(f"candidate language is {language_of(ct)}, the line says {ln['language']}")
            if ptree is None:
                problems.append("problem does not parse")
            else:
                for kind, name in ((ast.ClassDef, "Model"), (ast.FunctionDef, "get_inputs"),
                                   (ast.FunctionDef, "get_init_inputs")):
                    if top_level(ptree, kind, name) is None:
                        problems.append(f"problem defines no {name}")
        for pr in problems:
            bad[pr] += 1
            if len(examples[pr]) < 5:
                examples[pr].append(ln["candidate"])
        counts["pairs"] += 1
        counts["ok"] += not problems
        by["level"][ln["level"]] += 1
        by["language"][ln["language"]] += 1
        by["level x language"][f"level{ln['level']} {ln['language']}"] += 1
        by["source"][ln["source"]] += 1
        by["model"][f"{ln['source']} / {ln['model']}"] += 1
        rep = ln.get("reported") or {}
        ok = rep.get("correct", rep.get("runnable"))
        by["reported correct/runnable"][str(ok)] += 1
    result = {
        "pairs": counts["pairs"], "ok": counts["ok"],
        "problems": dict(bad), "examples": dict(examples),
        "distinct_problems": len({json.dumps([ln["level"], ln["problem_id"]]) for ln in lines}),
        "duplicate_candidate_contents": sum(n - 1 for n in seen.values() if n > 1),
        "by": {k: dict(sorted(v.items(), key=lambda kv: str(kv[0]))) for k, v in by.items()},
    }
    (out / "check.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?", type=Path, help="output directory")
    ap.add_argument("--from-mirror", type=Path, metavar="DIR", help="read bare git mirrors under DIR (no network)")
    ap.add_argument("--git", action="store_true", help="over the network with git fetch --depth 1 <commit>")
    ap.add_argument("--lock", type=Path, default=LOCK)
    ap.add_argument("--relock", action="store_true", help="re-run discovery and rewrite the lock")
    ap.add_argument("--stats", action="store_true", help="with --relock: print pools and drops")
    ap.add_argument("--absolute", action="store_true", help="absolute paths in pairs.jsonl")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--git-cache", type=Path, help="with --git: where the shallow clones go (default: a temp dir)")
    ap.add_argument("--base-url", help="another host for raw files (default https://raw.githubusercontent.com) "
                                       "or, with --git, for repositories (default https://github.com)")
    args = ap.parse_args(argv)
    if args.out is None and not args.relock:
        ap.error("OUT is required unless --relock")
    if args.from_mirror:
        readers = Readers("mirror", mirror=args.from_mirror)
    elif args.git:
        cache = args.git_cache or Path(tempfile.mkdtemp(prefix="kb-corpus-git-"))
        cache.mkdir(parents=True, exist_ok=True)
        readers = Readers("git", cache=cache, base=args.base_url)
    else:
        readers = Readers("raw", base=args.base_url)
    try:
        if args.relock:
            lock = relock(readers, args.stats)
            args.lock.write_text(dump_lock(lock), encoding="utf-8")
            print(f"wrote {args.lock}: {len(lock['pairs'])} pairs", file=sys.stderr)
        else:
            lock = json.loads(args.lock.read_text(encoding="utf-8"))
        if args.out is not None:
            lines = build(lock, readers, args.out, args.absolute, args.jobs)
            print(f"wrote {len(lines)} pairs to {args.out / 'pairs.jsonl'}", file=sys.stderr)
            if not args.no_check:
                result = check(args.out)
                print(json.dumps({k: result[k] for k in ("pairs", "ok", "problems", "distinct_problems",
                                                         "duplicate_candidate_contents", "by")}, indent=1))
                return 0 if result["ok"] == result["pairs"] else 1
    finally:
        readers.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
