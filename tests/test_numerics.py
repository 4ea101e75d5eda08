"""The numerics policy's determinism settings (kanalyze/dynamic/numerics.py), in a process of
their own: they are torch's global state."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(code: str) -> list:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_determinism_is_held_for_the_cases_that_ask_and_put_back_after() -> None:
    """Set before each run of a case that asks, though the candidate turns cuDNN's off in
    its constructor and in its call; torch's settings as they were for the next case that
    does not ask; fresh memory not filled with NaN while held (the poison's business)."""
    states = _run("""
import json, types, torch, torch.utils.deterministic
from kanalyze.dynamic import numerics
from kanalyze.dynamic.environment import Environment
env = types.SimpleNamespace(_determinism=None)
torch.backends.cudnn.deterministic = False          # a candidate's constructor
states = []
for wanted in (True, True, False, False, True):
    Environment._hold_determinism(env, wanted)
    states.append([numerics.determinism(), torch.utils.deterministic.fill_uninitialized_memory])
    torch.backends.cudnn.deterministic = False      # ... and its call
print(json.dumps(states))
""")
    held = {"deterministic_algorithms": True, "deterministic_warn_only": True, "cudnn_deterministic": True}
    torch_default = {"deterministic_algorithms": False, "deterministic_warn_only": False, "cudnn_deterministic": False}
    assert [state for state, _ in states] == [held, held, torch_default, torch_default, held]
    assert not any(fills for _, fills in states)


def test_alerts_name_torch_ops_without_a_deterministic_implementation_and_let_others_through() -> None:
    seen = _run("""
import json, warnings, torch
from kanalyze.dynamic import numerics
numerics.hold_deterministic()
with warnings.catch_warnings(record=True) as others:
    warnings.simplefilter("always")
    with numerics.alerts() as alerted:
        scratch = torch.zeros(3)
        scratch.put_(torch.tensor([0, 0]), torch.ones(2))
        scratch.put_(torch.tensor([1, 1]), torch.ones(2))   # the same op again: named once
        warnings.warn("the candidate's own warning")
print(json.dumps([alerted, [str(w.message) for w in others]]))
""")
    alerted, others = seen
    assert alerted == ["put_"]
    assert others == ["the candidate's own warning"]
