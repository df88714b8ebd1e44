"""Test-wide settings: candidate files, locks and stores go to a throwaway WORKBENCH_HOME, never ~/.workbench."""
import os
import sys
import tempfile
from pathlib import Path

_home = tempfile.mkdtemp(prefix="wb-test-home-")
os.environ.setdefault("WORKBENCH_HOME", _home)  # inherited by spawned workers
os.environ.pop("WORKBENCH_STORE", None)
sys.path.insert(0, str(Path(__file__).parent))  # cheat_headers
