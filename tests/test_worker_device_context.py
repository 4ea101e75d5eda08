"""kanalyze's allocation wrappers (environment.py) keep `with torch.device(d):` working.

Found on a GPU: every model a worker built under `torch.device("cuda")` got its weights
on the CPU, drawn there at a few hundred MB a second and then copied (0.6 s per
8192 x 8192 `nn.Linear`, against 1 ms outside the worker), because torch reads the set of
functions a device context applies to once, at first use, and the worker's poisoning
wrappers had replaced `torch.empty*` by then.  The same made a candidate's own
`torch.empty` under a device context a CPU tensor, and the planner's meta-device
models real allocations.  Each check runs in a fresh interpreter: the wrappers are
process-wide.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")


def _after_environment(program: str) -> str:
    """What `program` prints, run in a fresh interpreter after the GPU worker's wrappers are
    installed (nothing here needs a device)."""
    setup = "import torch\nfrom kanalyze.dynamic.environment import Environment\nenvironment = Environment('cuda')\n"
    done = subprocess.run([sys.executable, "-c", setup + textwrap.dedent(program)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


@pytest.mark.parametrize("body", [
    "[torch.nn.Linear(8192, 8192).weight]",
    "[torch.empty(3), torch.empty_strided((2, 2), (2, 1))]",
    "[torch.empty_like(torch.ones(2)), torch.nn.BatchNorm1d(4).running_var]",
])
def test_a_device_context_places_what_the_wrapped_constructors_make(body: str) -> None:
    made = _after_environment(f"""
        with torch.device("meta"):
            made = {body}
        print(" ".join(sorted({{str(t.device) for t in made}})))
    """)
    assert made == "meta"


def test_the_wrappers_still_poison_fresh_memory() -> None:
    filled = _after_environment("""
        environment.poison = 0x7F
        print(torch.empty(4, dtype=torch.uint8).tolist())
    """)
    assert filled == "[127, 127, 127, 127]"
