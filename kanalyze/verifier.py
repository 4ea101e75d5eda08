"""`Verifier`: kanalyze as a reward function, one problem and many candidates (docs/verifier.md).

    with Verifier("level1/19_ReLU.py", device="auto", gates="targeted") as v:
        result = v.verify(candidate_source)      # or a path
        reward = 1.0 if result.passed else 0.0

A thin facade over the audit's own per-pair function (audit/pair.py `run_pair`: the
static pass, the gates, KernelBench's allclose), run in this process, so that what
the dynamic pass keeps for the life of a process is kept between calls: the zygote
(torch and triton imported once, started here), the reference's size plan and
outputs (reference_cache.py: a later candidate starts no reference worker).  Each
candidate still gets fresh sandboxed workers, and KernelBench's allclose a fresh
process; the candidate never runs here (the static pass reads it, `compile` checks
its syntax, nothing executes it).  A candidate that is not valid Python or defines
no `ModelNew` is `invalid` at once, without starting anything.

`verify` never raises for what the candidate is or does (a syntax error, a crash, a
hang): the result says why.  It raises for misuse only: a missing problem or
candidate file, an unknown gate code, a closed Verifier.  Calls on one Verifier
run one at a time.
"""

from __future__ import annotations

import ast
import hashlib
import os
import shutil
import tempfile
import threading
import time
import weakref
from dataclasses import asdict, dataclass, field

PASSED, REJECTED, VIOLATION, UNCONFIRMED, INVALID = "passed", "rejected", "violation", "unconfirmed", "invalid"
FLAGGED_ONLY = "flagged-only"
# Clauses whose gate decides without a numeric tolerance: bits, value classes, sentinels,
# recorded events (docs/dynamic.md).  The others compare values within a calibrated bound.
TOLERANCE_FREE = frozenset({"EXC001", "EXC002", "MEM001", "MEM002", "MEM003", "MEM004", "ORD001", "ORD002",
                            "RES001"})
_PROBLEM_NAMES = ("Model", "get_inputs", "get_init_inputs")


@dataclass(frozen=True)
class Clause:
    code: str
    status: str                  # confirmed | refuted | unconfirmed | flagged-only
    message: str                 # the gate's one-line verdict, or the static finding's message
    flagged: bool                # the static pass flagged this clause in the candidate
    rows: tuple[int, ...] = ()   # the rows of its static findings
    witness: str | None = None   # a confirmed verdict's witness (JSON; `kanalyze replay PATH`)
    tolerance_free: bool = False  # decided without a numeric tolerance (bits, classes, events)


@dataclass(frozen=True)
class Allclose:
    verdict: str     # PASS | FAIL | ERROR | TIMEOUT | CRASHED | UNAVAILABLE (the problem could not be run: no
                     # word on the candidate) | SKIPPED (an invalid candidate: not run)
    detail: str

    @property
    def passed(self) -> bool:
        return self.verdict == "PASS"


@dataclass(frozen=True)
class VerifyResult:
    passed: bool                 # allclose PASS, no clause confirmed, none unconfirmed, the baseline decided
    outcome: str                 # passed | rejected | violation | unconfirmed | invalid
    reason: str                  # one line: why this outcome
    clauses: dict[str, Clause]
    allclose: Allclose
    seconds: dict[str, float]    # check, static, gates, allclose, total
    references: dict[str, int]   # reference outcomes this call reused / had computed
    candidate: str               # the file verified
    findings: list[dict] = field(default_factory=list)   # the static findings: code, row, message, kernel
    # The problem's own inputs, called twice and held to float64: {"status": "passed" | "failed" |
    # "undecided", "summary"}; None where no gate ran.
    baseline: dict | None = None
    # The protections the candidate ran without, in the gates' workers or the allclose check's
    # cage (docs/worker-protocol.md), one sentence each; empty when every one held.
    contained: tuple[str, ...] = ()

    def by_status(self, status: str) -> list[Clause]:
        return [c for c in self.clauses.values() if c.status == status]

    def to_dict(self) -> dict:
        return asdict(self)


_open_verifiers = 0
_open_lock = threading.Lock()


class Verifier:
    def __init__(self, problem, *, device: str = "auto", gates="targeted", case_timeout: float | None = None,
                 timeout: float = 600.0, witness_dir: str | None = None) -> None:
        from kanalyze.dynamic.runner import cuda_present, resolve_mode
        from kanalyze.dynamic.sandbox.process import prestart_zygote

        self.mode = resolve_mode(device)
        if self.mode == "cuda" and not cuda_present():
            raise ValueError("device='cuda', but no CUDA device is visible")
        self.gates = _gate_selection(gates)
        self.case_timeout, self.timeout = case_timeout, float(timeout)
        self._folder = tempfile.mkdtemp(prefix="kanalyze-verifier-")
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._folder, True)
        self.witness_dir = os.path.abspath(witness_dir or os.path.join(self._folder, "witnesses"))
        self._lock = threading.Lock()
        self._closed = False
        try:
            self.problem = self._place(problem, "problem")
            _check_problem(self.problem)
        except BaseException:
            self._cleanup()
            raise
        global _open_verifiers
        with _open_lock:
            _open_verifiers += 1
        # "zygote", or "fresh process (why)": how this Verifier's workers start
        self.workers = prestart_zygote(self.mode)

    # ------------------------------------------------------------ the call

    def verify(self, candidate) -> VerifyResult:
        """The verdict on one candidate (its source, or a path to it)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("this Verifier is closed")
            started = time.monotonic()
            path = self._place(candidate, "candidate")
            try:
                return self._verify(path, started)
            finally:
                if os.path.dirname(path) == self._folder and not self._witnessed(path):
                    try:
                        os.remove(path)
                    except OSError:
                        pass

    def _verify(self, path: str, started: float) -> VerifyResult:
        from kanalyze.dynamic.reference_cache import REFERENCES

        invalid = _invalid(path, self.problem)
        checked = time.monotonic() - started
        nothing = {"check": round(checked, 3), "static": 0.0, "gates": 0.0, "allclose": 0.0}
        if invalid is not None:
            reason, clauses = invalid
            return VerifyResult(False, INVALID, reason, clauses, Allclose("SKIPPED", f"not run: {reason}"),
                                {**nothing, "total": round(checked, 3)}, {"reused": 0, "computed": 0}, path)
        from kanalyze.audit.pair import run_pair

        spec = {"candidate": path, "problem": self.problem, "gates": self.gates, "device": self.mode,
                "case_timeout": self.case_timeout, "seconds": self.timeout - checked, "witness_dir": self.witness_dir,
                "overlap_allclose": True}
        hits, misses = REFERENCES.hits, REFERENCES.misses
        try:
            raw = run_pair(spec)
        except Exception as exc:  # kanalyze's own failure: not the candidate's, and not a pass
            reason = f"kanalyze failed: {type(exc).__name__}: {exc}"
            total = round(time.monotonic() - started, 3)
            return VerifyResult(False, UNCONFIRMED, reason, {}, Allclose("SKIPPED", f"not run: {reason}"),
                                {**nothing, "total": total}, {"reused": 0, "computed": 0}, path)
        references = {"reused": REFERENCES.hits - hits, "computed": REFERENCES.misses - misses}
        clauses = _clauses(raw["static"], raw["verdicts"])
        allclose = Allclose(raw["allclose"]["verdict"], raw["allclose"]["detail"])
        outcome, reason = _outcome(clauses, allclose, raw.get("baseline"))
        seconds = {"check": round(checked, 3),
                   **{k: v for k, v in raw["seconds"].items() if isinstance(v, (int, float))},   # (not the accounts)
                   "total": round(time.monotonic() - started, 3)}
        contained = tuple(dict.fromkeys([*(raw.get("contained") or []), *(raw["allclose"].get("contained") or [])]))
        return VerifyResult(outcome == PASSED, outcome, reason, clauses, allclose, seconds, references, path,
                            raw["static"], raw.get("baseline"), contained)

    # ------------------------------------------------------------ files

    def _place(self, given, role: str) -> str:
        """A path as given (it must exist), or the source written into this Verifier's folder."""
        if isinstance(given, os.PathLike) or (isinstance(given, str) and "\n" not in given
                                               and (given.endswith(".py") or os.path.isfile(given))):
            path = os.fspath(given)
            if not os.path.isfile(path):
                raise FileNotFoundError(f"the {role} file {path} does not exist")
            return os.path.abspath(path)
        if not isinstance(given, str):
            raise TypeError(f"the {role} must be its source (str) or a path, not {type(given).__name__}")
        digest = hashlib.sha256(given.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        path = os.path.join(self._folder, f"{role}_{digest}.py")
        with open(path, "w", encoding="utf-8", errors="surrogatepass") as handle:
            handle.write(given)
        return path

    def _witnessed(self, path: str) -> bool:
        """Does a witness refer to this candidate file (its name starts every witness's)?"""
        stem = os.path.splitext(os.path.basename(path))[0] + "-"
        try:
            return any(name.startswith(stem) for name in os.listdir(self.witness_dir))
        except OSError:
            return False

    # ------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Forget this problem's references, remove the Verifier's folder (and the default
        witness folder in it), and shut the zygote down when no other Verifier is open."""
        global _open_verifiers
        with self._lock:
            if self._closed:
                return
            self._closed = True
            from kanalyze.dynamic.reference_cache import REFERENCES
            from kanalyze.dynamic.sandbox import zygote_client

            REFERENCES.forget(self.problem)
            self._cleanup()
            with _open_lock:
                _open_verifiers -= 1
                last = _open_verifiers == 0
            if last:
                zygote_client.shutdown_all()

    def __enter__(self) -> "Verifier":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---------------------------------------------------------------- helpers


def _gate_selection(gates):
    """"targeted", "all", or the codes (a list, or "A,B") of gates that run against a problem."""
    from kanalyze.dynamic.gates import gates_by_code

    if gates in ("targeted", "all"):
        return gates
    codes = [c.strip().upper() for c in (gates.split(",") if isinstance(gates, str) else gates) if c.strip()]
    known = sorted(code for code, gate in gates_by_code().items() if not gate.kernel_harness)
    unknown = [c for c in codes if c not in known]
    if unknown or not codes:
        raise ValueError(f"gates must be 'targeted', 'all' or codes among {', '.join(known)}; got {gates!r}")
    return codes


def _check_problem(path: str) -> None:
    """A KernelBench problem: valid Python defining Model, get_inputs and get_init_inputs (read, not run)."""
    try:
        with open(path, "rb") as handle:
            tree = ast.parse(handle.read(), filename=path)
    except (SyntaxError, ValueError) as exc:
        raise ValueError(f"the problem {path} is not valid Python: {exc}") from exc
    names = {node.name for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
    names |= {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
              if isinstance(t, ast.Name)}
    names |= {(a.asname or a.name).split(".")[0] for node in tree.body
              if isinstance(node, (ast.Import, ast.ImportFrom)) for a in node.names}
    missing = [name for name in _PROBLEM_NAMES if name not in names]
    if missing:
        raise ValueError(f"the problem {path} defines no {', '.join(missing)} (a KernelBench problem "
                         f"defines {', '.join(_PROBLEM_NAMES)})")


def _invalid(path: str, problem: str) -> tuple[str, dict[str, Clause]] | None:
    """Why the candidate cannot be run at all (not Python, no `ModelNew`), or None.  `compile`
    parses and compiles; it executes nothing."""
    from kanalyze.dynamic.harness import NoHarness, find_harness

    try:
        with open(path, "rb") as handle:
            data = handle.read()
        if not data.strip():
            raise SyntaxError("empty source: there is no ModelNew")
        compile(data, path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        where = f" (line {exc.lineno}, column {exc.offset})" if exc.lineno else ""
        message = f"cannot parse: {exc.msg}{where}"
        return f"KAN000 {message}", {"KAN000": Clause("KAN000", FLAGGED_ONLY, message, True, (exc.lineno or 1,))}
    except Exception as exc:  # too deep to compile (MemoryError, RecursionError), unreadable, NUL bytes
        message = f"cannot parse: {type(exc).__name__}: {exc}"
        return f"KAN000 {message}", {"KAN000": Clause("KAN000", FLAGGED_ONLY, message, True, (1,))}
    harness = find_harness(path, reference=problem)
    if isinstance(harness, NoHarness):
        return harness.reason, {}
    return None


def _clauses(static: list[dict], verdicts: dict[str, dict]) -> dict[str, Clause]:
    rows: dict[str, list[int]] = {}
    for finding in static:
        rows.setdefault(finding["code"], []).append(finding["row"])
    clauses = {}
    for code, verdict in verdicts.items():
        witness, message = verdict.get("witness"), verdict["summary"]
        if witness and not os.path.isfile(witness):   # "not written: why"
            witness, message = None, f"{message} (witness {witness})"
        clauses[code] = Clause(code, verdict["status"], message, bool(verdict.get("static_flag")),
                               tuple(rows.get(code, ())), witness, code in TOLERANCE_FREE)
    for code, found in rows.items():
        if code not in clauses:
            first = next(f for f in static if f["code"] == code)
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            clauses[code] = Clause(code, FLAGGED_ONLY, first["message"] + more, True, tuple(found))
    return dict(sorted(clauses.items()))


def _outcome(clauses: dict[str, Clause], allclose: Allclose, baseline: dict | None = None) -> tuple[str, str]:
    """rejected (allclose does not accept it) > violation (a clause confirmed) > unconfirmed > passed.
    A baseline kanalyze could not decide (its reference worker died, say) is unconfirmed too:
    with nothing flagged it is the only gate that ran."""
    said = lambda c: f"{c.code} {c.status}: {c.message}"  # noqa: E731
    confirmed = [said(c) for c in clauses.values() if c.status == "confirmed"]
    unconfirmed = [said(c) for c in clauses.values() if c.status == "unconfirmed"]
    if baseline and baseline.get("status") == "undecided" and not unconfirmed:
        unconfirmed = [f"baseline undecided: {baseline.get('summary')}"]
    if allclose.verdict == "UNAVAILABLE":   # the check's own failure: no word on the candidate
        unconfirmed.append(f"allclose UNAVAILABLE: {allclose.detail}")
    elif not allclose.passed:
        return REJECTED, "; ".join([f"allclose {allclose.verdict}: {allclose.detail}", *confirmed])
    if confirmed:
        return VIOLATION, "; ".join(confirmed)
    if unconfirmed:
        return UNCONFIRMED, "; ".join(unconfirmed)
    refuted = [c.code for c in clauses.values() if c.status == "refuted"]
    return PASSED, f"allclose PASS ({allclose.detail})" + (f"; refuted: {', '.join(refuted)}" if refuted else "")


__all__ = ["Allclose", "Clause", "Verifier", "VerifyResult"]
