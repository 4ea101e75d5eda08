"""A candidate cannot tell by name that kanalyze runs it (disguise.py).

A hostile candidate that calls its Triton kernel only when its process names kanalyze
(a module, an importable package, a variable, its working directory, a frame on the
stack) and PyTorch otherwise is caught: RES001 confirmed.  A probe candidate reports
what a candidate sees at import, in its call and inside kanalyze's torch recorder,
through zygote-forked and fresh workers: nothing names kanalyze; `TRITON_INTERPRET=1`
is there on the CPU (every Triton kernel needs it there).  The worker's own imports
keep working after kanalyze is hidden (a subprocess plays the worker).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kanalyze.cli import main
from kanalyze.dynamic.harness import find_harness
from kanalyze.dynamic.runner import Options, run_gates
from kanalyze.dynamic.sandbox import zygote_client
from kanalyze.dynamic.sandbox.process import candidate_caches

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "fixtures" / "kernelbench"
TELLS = KB / "hostile" / "level1_problem6_watched_tells.py"


def _mentions(value: object) -> bool:
    return "kanalyze" in str(value).lower()


@pytest.fixture()
def no_user_tells(monkeypatch) -> None:
    """The user's own variables that name kanalyze (a checkout or virtual environment in a folder
    of that name on PATH) are not kanalyze's doing: left out here, so that what the candidate
    could see is what kanalyze adds.  An interpreter installed under such a folder shows in
    every frame of torch's: nothing kanalyze can hide."""
    for name, value in list(os.environ.items()):
        if _mentions(value):
            parts = [part for part in value.split(os.pathsep) if not _mentions(part)]
            monkeypatch.setenv(name, os.pathsep.join(parts)) if parts else monkeypatch.delenv(name)
    installed = [path for path in (sys.prefix, torch.__file__, triton.__file__) if _mentions(path)]
    if installed:
        pytest.skip(f"this interpreter's own files lie in a folder named after kanalyze: {installed}")


def test_the_watched_candidate_sees_the_tells_where_they_are(monkeypatch) -> None:
    """The control: in this process (kanalyze imported, its frames below) the candidate sees them."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    spec = importlib.util.spec_from_file_location("watched_tells_control", TELLS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    seen = module.tells()
    assert any(tell.startswith("module kanalyze") for tell in seen) and "importable" in seen, seen


def test_a_candidate_that_computes_in_pytorch_when_unwatched_is_res001(tmp_path, capsys, no_user_tells) -> None:
    """`check --dynamic --gates RES001` on the CPU: no tell shows, the candidate takes its
    PyTorch path, and RES001 is confirmed (with its tells visible it ran the kernel: refuted)."""
    (tmp_path / "level1").mkdir()
    shutil.copy(KB / "level1" / "6_leaky_relu.py", tmp_path / "level1")
    shutil.copy(TELLS, tmp_path / TELLS.name)
    (tmp_path / "pyproject.toml").write_text("[tool.kanalyze]\n")
    main(["check", str(tmp_path / TELLS.name), "--dynamic", "--gates", "RES001", "--kernelbench", str(tmp_path),
          "--device", "cpu", "--no-cache", "--output-format", "json"])
    findings = json.loads(capsys.readouterr().out)
    res001 = [f for f in findings if f["code"] == "RES001"]
    assert len(res001) == 1 and res001[0]["status"] == "confirmed", res001
    assert "ran in PyTorch" in res001[0]["evidence"]["gate_result"], res001


PROBE = r'''
import importlib.util, json, os, sys
import torch
import torch.nn.functional as F

OUT = os.path.join(os.environ["TRITON_CACHE_DIR"], "tells.jsonl")


def look(where):
    try:
        spec = "found" if importlib.util.find_spec("kanalyze") is not None else "none"
    except Exception as exc:
        spec = type(exc).__name__
    try:
        import kanalyze  # noqa: F401
        imported = "imported"
    except Exception as exc:
        imported = type(exc).__name__
    frames, frame = [], sys._getframe()
    while frame is not None:
        frames.append([frame.f_code.co_filename, frame.f_code.co_name, str(frame.f_globals.get("__name__"))])
        frame = frame.f_back
    seen = {"where": where, "modules": [name for name in sys.modules if "kanalyze" in name.lower()],
            "spec": spec, "import": imported, "environment": dict(os.environ), "cwd": os.getcwd(),
            "listing": os.listdir("."), "frames": frames, "argv": sys.argv + list(getattr(sys, "orig_argv", [])),
            "cmdline": open("/proc/self/cmdline", "rb").read().decode("utf-8", "replace").split("\0"),
            "cgroup": open("/proc/self/cgroup").read(),
            "name": __name__, "path": sys.path, "modes": [repr(m) for m in
                                                           torch.overrides._get_current_function_mode_stack()]}
    with open(OUT, "a") as handle:
        handle.write(json.dumps(seen) + "\n")


look("import")


class Seen(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.Tensor.add:
            look("recorder")
        return super().__torch_function__(func, types, args, kwargs or {})


class ModelNew(torch.nn.Module):
    def __init__(self, negative_slope=0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        look("call")
        x.detach().as_subclass(Seen).add(1)   # through kanalyze's torch recorder, then here
        return F.leaky_relu(x, self.negative_slope)
'''


@pytest.mark.parametrize("start", ["zygote", "fresh"])
def test_a_candidate_sees_nothing_that_names_kanalyze(tmp_path, monkeypatch, no_user_tells, start) -> None:
    if start == "fresh":
        monkeypatch.setenv(zygote_client.DISABLE, "1")
    probe = tmp_path / "level1_problem6_probe.py"
    probe.write_text(PROBE)
    report = Path(candidate_caches({}, str(probe))["TRITON_CACHE_DIR"]) / "tells.jsonl"
    report.unlink(missing_ok=True)
    try:
        gate_run = run_gates(find_harness(str(probe), kernelbench=str(KB)), ["RES001"],
                             options=Options(mode="cpu"))
        seen = [json.loads(line) for line in report.read_text().splitlines()]
    finally:
        report.unlink(missing_ok=True)
    started = gate_run.environment["candidate_confinement"]["start"]
    assert started.startswith("forked" if start == "zygote" else "fresh process"), started
    assert {"import", "call", "recorder"} <= {s["where"] for s in seen}, [s["where"] for s in seen]
    # Its lookups of torch's mode stack (where it reads the recorder's repr) are caught themselves.
    verdicts = {v.code: v for v in gate_run.verdicts}
    assert verdicts["INT001"].status == "confirmed" and "mode stack" in verdicts["INT001"].summary, verdicts
    for s in seen:
        where = s["where"]
        assert s["modules"] == [] and s["name"] != "" and not _mentions(s["name"]), (where, s["modules"], s["name"])
        assert s["spec"] == s["import"] == "ModuleNotFoundError", (where, s["spec"], s["import"])
        named = {k for k in s["environment"] if _mentions(k)}
        assert named == set(), (where, named)
        valued = {k for k, v in s["environment"].items() if _mentions(v) and os.environ.get(k) != v}
        assert valued == set(), (where, {k: s["environment"][k] for k in valued})
        places = [s["cwd"], s["environment"]["HOME"], s["environment"]["TMPDIR"], *s["listing"]]
        assert not [p for p in places if _mentions(p) or "candidate" in p.lower()], (where, places)
        assert "spec.json" not in s["listing"], (where, s["listing"])
        assert s["environment"]["TRITON_INTERPRET"] == "1"          # on the CPU, unavoidable
        assert not [f for f in s["frames"] if any(_mentions(part) for part in f)], (where, s["frames"])
        assert not [a for a in s["argv"] + s["path"] + s["modes"] if _mentions(a)], where
        assert not [a for a in s["cmdline"] if _mentions(a) or "candidate" in a], (where, s["cmdline"])
        assert not _mentions(s["cgroup"]), (where, s["cgroup"])
    # kanalyze's frames were on those stacks, under neutral names: the call came through its
    # case runner, and the recorder's frame sat between the call and the tensor's hook.
    call = next(s for s in seen if s["where"] == "call")
    assert ["execute.py", "_run_once", "execute"] in call["frames"], call["frames"]
    recorder = next(s for s in seen if s["where"] == "recorder")
    assert ["recording.py", "__torch_function__", "recording"] in recorder["frames"], recorder["frames"]


WORKER_SIDE = r'''
import json, sys, traceback
import torch, triton
from kanalyze.dynamic.sandbox.worker import import_modules
import_modules("cpu")
from kanalyze.dynamic import recording
from kanalyze.dynamic.sandbox import disguise
hiding = disguise.hide()
def attempt(statement):
    try:
        exec(statement, {})
    except ImportError as exc:
        return "".join(traceback.format_exception(exc))
out = {"refused": attempt("import kanalyze"), "missing": attempt("import no_such_module_here")}
own = {}
exec("from kanalyze.dynamic import kernel_call\nfrom kanalyze.dynamic.sandbox.transport import ArrayFolder",
     vars(recording), own)
out["served"] = [own["kernel_call"].__name__, own["ArrayFolder"].__module__]
out["back"] = sorted(name for name in sys.modules if "kanalyze" in name)
hiding.again()
out["again"] = sorted(name for name in sys.modules if "kanalyze" in name)
code = recording.CallRecorder.__torch_function__.__code__
out["recorder"] = [code is recording.RECORDER_CODE, code.co_filename]
print(json.dumps(out))
'''


def test_kanalyzes_own_imports_still_work_once_it_is_hidden() -> None:
    """In a process like a candidate's worker: `import kanalyze` is refused exactly as a missing
    module is (same traceback, no frame of the refusal); kanalyze's own lazy imports are served
    and leave `sys.modules` again; the recorder's seal still matches its renamed code."""
    done = subprocess.run([sys.executable, "-c", WORKER_SIDE], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "TRITON_INTERPRET": "1"}, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["refused"].replace("kanalyze", "no_such_module_here") == out["missing"], out
    assert out["served"] == ["kernel_call", "transport"], out["served"]
    assert "kanalyze.dynamic.sandbox.transport" in out["back"] and out["again"] == [], out
    assert out["recorder"] == [True, "recording.py"], out["recorder"]


GPU_WORKER_SET_UP = r'''
import sys
import torch, triton
from kanalyze.dynamic.sandbox.worker import import_modules
import_modules("cuda")
from kanalyze.dynamic import loading, numerics
from kanalyze.dynamic.environment import Environment
from kanalyze.dynamic.sandbox import disguise
disguise.hide()
disguise.neutral_module_names(loading)
numerics.apply()
Environment("cuda")
print("set up")
'''


def test_a_gpu_workers_set_up_after_kanalyze_is_hidden_imports_nothing_new() -> None:
    """A GPU candidate worker hides kanalyze, then builds its Environment (as worker.serve does):
    every module that needs was imported before the hiding (import_modules), else it is refused
    like a module that is not installed, and no candidate's worker could start.  Runs without a
    device: building the Environment opens none."""
    done = subprocess.run([sys.executable, "-c", GPU_WORKER_SET_UP], cwd=ROOT, capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "set up", done.stderr[-3000:]
