"""Headless Chromium: a screenshot of a page (an HTML report) and its DOM after scripts ran, and `DevTools`, a
Chromium driven over the DevTools protocol for pages that need scripts run in them (a live JupyterLab). Used by the
browser tests (tests/test_notebooks.py, tests/test_viz.py), scripts/sweep_report.sh and experiments/screenshots.py;
needs a `chromium` binary (Debian: `apt-get install chromium`, which `WORKBENCH_BROWSER=1 bash
scripts/setup_env.sh` does where apt is available). Nothing is fetched from the network: every host name resolves
to nothing (a local server is reached by its IP address).
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

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


def _command(profile: str, args: list[str], loopback: bool = False) -> list[str]:
    exe = find_chromium()
    if exe is None:
        raise BrowserMissing("no Chromium found (apt-get install chromium, or set WORKBENCH_CHROMIUM)")
    # a throwaway profile; no sandbox (root in a container); no network: every host resolves to nothing (the rule
    # covers IP literals too), but for 127.0.0.1 with `loopback` (a local Jupyter server)
    rules = "MAP * ~NOTFOUND" + (", EXCLUDE 127.0.0.1" if loopback else "")
    return [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
            "--disable-extensions", "--disable-background-networking", f"--user-data-dir={profile}",
            f"--host-resolver-rules={rules}", *args]


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="wb-chromium-") as profile:
        return subprocess.run(_command(profile, args), capture_output=True, text=True, timeout=timeout)


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


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (for a local server or DevTools)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class DevTools:
    """A headless Chromium with one page, driven over the DevTools protocol: `navigate(url)`, `evaluate(js)`,
    `wait_for(js)` (until the expression is truthy), `screenshot(path)`. It reaches 127.0.0.1 and nothing else. A
    context manager; needs `websocket-client` (a JupyterLab dependency, so in the `test` extra)."""

    def __init__(self, width: int = 1400, height: int = 2000, start_timeout: float = 60):
        self.width, self.height, self.start_timeout = width, height, start_timeout
        self._id = 0
        self._proc = self._ws = self._profile = None

    def __enter__(self) -> "DevTools":
        try:
            import websocket
        except ImportError as e:
            raise BrowserMissing("DevTools needs websocket-client (pip install websocket-client)") from e
        self._profile = tempfile.TemporaryDirectory(prefix="wb-chromium-")
        port = free_port()
        cmd = _command(self._profile.name, [f"--remote-debugging-port={port}", "--remote-allow-origins=*",
                                            f"--window-size={self.width},{self.height}", "about:blank"],
                       loopback=True)
        self._proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base, deadline = f"http://127.0.0.1:{port}", time.monotonic() + self.start_timeout
        while True:
            try:
                with urllib.request.urlopen(f"{base}/json/list", timeout=5) as r:
                    pages = [t for t in json.load(r) if t.get("type") == "page"]
                if pages:
                    break
            except OSError:
                pass
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise RuntimeError(f"chromium's DevTools did not come up on port {port}")
            time.sleep(0.2)
        self._ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=120,
                                               suppress_origin=True)
        self.send("Page.enable")
        self.send("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height, deviceScaleFactor=1,
                  mobile=False)
        return self

    def __exit__(self, *exc) -> None:
        if self._ws is not None:
            self._ws.close()
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        if self._profile is not None:
            self._profile.cleanup()

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """One protocol command; its result (events that arrive meanwhile are dropped)."""
        self._id += 1
        self._ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self._ws.recv())
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def navigate(self, url: str) -> None:
        self.send("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        """The expression's value in the page (JSON-able values only); a thrown error raises RuntimeError."""
        r = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"in the page: {r['exceptionDetails'].get('exception', {}).get('description')}")
        return r.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 120, poll: float = 0.5) -> Any:
        """Evaluate `expression` until it is truthy (errors count as false); TimeoutError after `timeout` s."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = self.evaluate(expression)
            except RuntimeError:
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"not true after {timeout:.0f} s: {expression[:200]}")
            time.sleep(poll)

    def screenshot(self, out: str | Path) -> Path:
        """A PNG of the viewport."""
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"]))
        return out


__all__ = ["BrowserMissing", "DevTools", "dump_dom", "find_chromium", "free_port", "screenshot"]
