"""Headless Chromium: a screenshot of a page (an HTML report) and its DOM after scripts ran. Used by the browser
test and scripts/sweep_report.sh; needs a `chromium` binary (Debian: `apt-get install chromium`, which
`WORKBENCH_BROWSER=1 bash scripts/setup_env.sh` does where apt is available). Nothing is fetched from the network.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


class BrowserMissing(RuntimeError):
    pass


def find_chromium() -> str | None:
    """$WORKBENCH_CHROMIUM, else the first of NAMES on PATH."""
    env = os.environ.get("WORKBENCH_CHROMIUM")
    if env:
        return env if Path(env).exists() or shutil.which(env) else None
    return next((p for p in map(shutil.which, NAMES) if p), None)


def _url(page: str | Path) -> str:
    s = str(page)
    return s if "://" in s or s.startswith("about:") else Path(s).resolve().as_uri()


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    exe = find_chromium()
    if exe is None:
        raise BrowserMissing("no Chromium found (apt-get install chromium, or set WORKBENCH_CHROMIUM)")
    with tempfile.TemporaryDirectory(prefix="wb-chromium-") as profile:
        # a throwaway profile; no sandbox (root in a container); no network: every host resolves to nothing
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
               "--disable-extensions", "--disable-background-networking", f"--user-data-dir={profile}",
               "--host-resolver-rules=MAP * ~NOTFOUND", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def screenshot(page: str | Path, out: str | Path, width: int = 1280, height: int = 2000,
               wait_ms: int = 10000, timeout: float = 120) -> Path:
    """A PNG of `page` (a file path or URL) at `width` x `height` after up to `wait_ms` of (virtual) time for its
    scripts."""
    out = Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():
        out.unlink()
    r = _run([f"--window-size={width},{height}", f"--virtual-time-budget={wait_ms}", f"--screenshot={out}",
              _url(page)], timeout)
    if not out.exists():
        raise RuntimeError(f"chromium wrote no screenshot (exit {r.returncode}): {r.stderr[-2000:]}")
    return out


def dump_dom(page: str | Path, wait_ms: int = 10000, timeout: float = 120) -> str:
    """The page's DOM serialised after its scripts ran (what a reader's browser would hold)."""
    r = _run([f"--virtual-time-budget={wait_ms}", "--dump-dom", _url(page)], timeout)
    if r.returncode != 0 or not r.stdout.strip():
        raise RuntimeError(f"chromium --dump-dom failed (exit {r.returncode}): {r.stderr[-2000:]}")
    return r.stdout


__all__ = ["BrowserMissing", "dump_dom", "find_chromium", "screenshot"]
