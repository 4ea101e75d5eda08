"""INT001's watch of what a candidate replaces: torch's own lazy patching is not the candidate's.

Importing `torch._dynamo` (torch does it lazily: a candidate's `load_inline`, a
`torch.compile`) replaces `torch.manual_seed` with torch's `_disable_dynamo`
wrapper of it.  On the GPU, where workers do not import `torch._dynamo` up front,
that once confirmed INT001 ("replaced torch.manual_seed") on CUDA candidates that
replace nothing.
"""

import functools
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from kanalyze.dynamic.integrity import Watch  # noqa: E402


def test_importing_torch_dynamo_after_the_snapshot_replaces_nothing_of_the_candidates():
    script = (
        "import torch\n"
        "from kanalyze.dynamic.integrity import Watch\n"
        "assert 'torch._dynamo' not in __import__('sys').modules\n"
        "before = torch.manual_seed\n"
        "watch = Watch()\n"
        "import torch._dynamo\n"
        "print(torch.manual_seed is not before, watch.replaced())\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[0] == "True", "torch._dynamo no longer wraps torch.manual_seed: the case is moot"
    assert result.stdout.strip() == "True []"


def test_a_wrapper_the_candidate_writes_is_still_a_replacement():
    original = torch.manual_seed
    watch = Watch()

    @functools.wraps(original)
    def pinned(seed):
        return original(0)

    try:
        torch.manual_seed = pinned
        assert "torch.manual_seed" in watch.replaced()
        torch.manual_seed = torch._disable_dynamo(original)
        assert "torch.manual_seed" not in watch.replaced()
    finally:
        torch.manual_seed = original
