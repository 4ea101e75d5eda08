"""A reference worker that does not answer says where it was (sandbox/stacks.py).

A reference that outlives its case's time is kanalyze's failure to report, never a
verdict; "did not finish within N s" alone left the reason to guesswork.  The
reference worker dumps its stack on SIGUSR1 before the parent kills it, and the
job loop's innermost frames go into the outcome's detail.
"""

from __future__ import annotations

from pathlib import Path

from kanalyze.dynamic.cases import Case
from kanalyze.dynamic.harness import find_harness
from kanalyze.dynamic.sandbox import stacks
from kanalyze.dynamic.sandbox.process import Limits
from kanalyze.dynamic.session import BASELINE, Session

KB = Path(__file__).resolve().parent.parent / "fixtures" / "kernelbench"
PROBLEM = KB / "level1" / "8_linear_relu.py"
GOOD = KB / "candidates" / "level1_problem8_linear_relu_torch_matmul.py"

DUMP = '''Thread 0x00007f01 (most recent call first):
  File "/usr/lib/python3.12/threading.py", line 355 in wait
  File "/k/kanalyze/dynamic/sandbox/process.py", line 110 in run

Current thread 0x00007f00 (most recent call first):
  File "/k/problem.py", line 12 in forward
  File "/usr/lib/torch/nn/modules/module.py", line 1773 in _call_impl
  File "/k/kanalyze/dynamic/sandbox/float64.py", line 47 in _run
  File "/k/kanalyze/dynamic/sandbox/worker.py", line 253 in _serve_jobs
  File "/k/kanalyze/dynamic/sandbox/worker.py", line 204 in _start
'''


def test_the_job_loops_innermost_frames_are_read_from_a_dump() -> None:
    said = stacks.innermost("earlier output\n" + DUMP)
    assert said == "problem.py:12 forward < module.py:1773 _call_impl < float64.py:47 _run", said
    assert stacks.innermost("no dump here") == ""


def test_a_reference_past_its_time_says_where_it_was(tmp_path: Path) -> None:
    problem = tmp_path / "stuck_problem.py"
    problem.write_text(PROBLEM.read_text().replace("import torch\n", "import time\nimport torch\n", 1)
                       .replace("    def forward(self, x):\n", "    def forward(self, x):\n        time.sleep(600)\n", 1))
    line = problem.read_text().splitlines().index("        time.sleep(600)") + 1
    session = Session(find_harness(str(GOOD), reference=str(problem)), "cpu", Limits(case_seconds=8))
    try:
        sizes = {"batch_size": 8, "in_features": 16, "out_features": 16}
        results = session.execute([Case(BASELINE, "", sizes, seed=0, model_seed=0)])
    finally:
        session.close()
    reference = results[0].reference
    assert reference.status == "timeout", reference
    assert reference.detail.startswith("did not finish within 8 s on sizes (batch_size=8, in_features=16, "
                                       "out_features=16), seed 0, given inputs (at "), reference.detail
    assert f"stuck_problem.py:{line} forward" in reference.detail, reference.detail


def test_a_judge_that_ends_on_a_later_reference_says_so_for_the_earlier_ones(tmp_path: Path) -> None:
    """A GPU run that streams (streaming.py) computes each case's reference in the judge just
    before the case: a later one that outlives its time ends the judge, and the outputs it still
    held for earlier cases end with it.  Each earlier case says so, with how the judge ended, and
    so does the hand-over (`judge_gone`): never "the reference worker ended" with no reason."""
    problem = tmp_path / "stuck_at_16.py"
    problem.write_text(PROBLEM.read_text().replace("import torch\n", "import time\nimport torch\n", 1)
                       .replace("    def forward(self, x):\n",
                                "    def forward(self, x):\n        if x.shape[0] == 16:\n            time.sleep(600)\n", 1))
    session = Session(find_harness(str(GOOD), reference=str(problem)), "cpu", Limits(case_seconds=8))
    features = {"in_features": 16, "out_features": 16}
    cases = [Case(BASELINE, "", {"batch_size": 8, **features}, seed=0, model_seed=0),
             Case("later", "", {"batch_size": 16, **features}, seed=0, model_seed=0)]
    reference_cases, by_key, missing = {}, {}, []
    try:
        session._add_references(cases, reference_cases, by_key, missing)
        session._references([cases[0].input_key], reference_cases, by_key)
        assert by_key[cases[0].input_key].status == "done"
        session._references([cases[1].input_key], reference_cases, by_key)
    finally:
        session.close()
    assert by_key[cases[1].input_key].status == "timeout"
    lost = by_key[cases[0].input_key].meta.get("arrays_lost", "")
    assert ("it ended while computing references (did not finish within 8 s on sizes (batch_size=16, "
            "in_features=16, out_features=16), seed 0, given inputs (at ") in lost, lost
    assert session.judge_gone.startswith("it ended while computing references (did not finish within 8 s"), \
        session.judge_gone
