"""Test-wide settings: candidate files, locks and stores go to a throwaway WORKBENCH_HOME, never ~/.workbench."""
import os
import sys
import tempfile
from pathlib import Path

_home = tempfile.mkdtemp(prefix="wb-test-home-")
os.environ.setdefault("WORKBENCH_HOME", _home)  # inherited by spawned workers
os.environ.pop("WORKBENCH_STORE", None)
sys.path.insert(0, str(Path(__file__).parent))  # cheat_headers

import pytest  # noqa: E402


@pytest.fixture
def gpu_to_itself():
    """GPU 0's evaluation lock for the whole test: tests that time kernels or load the GPU outside the harness (whose
    stages take the lock themselves) neither disturb nor are disturbed by a benchmark timing beside them. Not for tests
    that run the ladder in this process: its own lock would wait on this one."""
    from workbench.devices.local import gpu_lock

    with gpu_lock(0):
        yield
