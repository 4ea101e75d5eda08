import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="session")
def _private_witness_key(tmp_path_factory):
    """Witnesses are signed with a per-user key (kanalyze/dynamic/witness.py): the tests
    keep theirs in a folder of their own, never in the user's home."""
    import os

    previous = os.environ.get("KANALYZE_KEY_DIR")
    os.environ["KANALYZE_KEY_DIR"] = str(tmp_path_factory.mktemp("witness-key"))
    yield
    if previous is None:
        os.environ.pop("KANALYZE_KEY_DIR", None)
    else:
        os.environ["KANALYZE_KEY_DIR"] = previous
