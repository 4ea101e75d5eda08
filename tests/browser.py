"""A headless Chromium for the tests, driven over the DevTools protocol on a pipe (standard library only).

    with Browser() as browser:             # Browser.find() names the executable, or None
        browser.open("file:///.../report.html")
        browser.evaluate("document.title")
        browser.click("#pairs th:nth-child(8) button")     # real mouse events at the element
        browser.click("a.witness", navigates=True)         # ... and wait for the page it opens
        browser.errors                     # uncaught exceptions, console errors, error log entries

`--remote-debugging-pipe` makes Chromium read protocol messages (JSON, each ended
by a NUL byte) from its file descriptor 3 and write its own to 4; no port is opened.
The browser runs with a fresh profile and without networking of its own (no
updates, sync or first-run pages), so that whatever it logs comes from the page.
On Debian: `apt-get install -y chromium`.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time

EXECUTABLES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-default-apps",
         "--disable-extensions", "--mute-audio")


class BrowserError(Exception):
    pass


class Browser:
    def __init__(self, executable: str | None = None, timeout: float = 30.0, start_timeout: float = 180.0) -> None:
        """`timeout`: each command's answer; `start_timeout`: the first, while Chromium starts (on a
        2-core machine running the test suite beside it, a fresh profile took over 30 s)."""
        self.executable = executable or self.find()
        if self.executable is None:
            raise BrowserError("no Chromium found (looked for " + ", ".join(EXECUTABLES) + " and $KANALYZE_CHROMIUM)")
        self.timeout = timeout
        self.errors: list[str] = []
        self._profile = tempfile.mkdtemp(prefix="kanalyze-chromium-")
        self._buffer = b""
        self._next_id = 0
        self._session: str | None = None
        self._events: list[dict] = []
        commands_read, self._commands = os.pipe()
        self._replies, replies_write = os.pipe()

        def on_fds_3_and_4() -> None:        # in the child: the protocol's two pipes as fds 3 and 4
            read_end = fcntl.fcntl(commands_read, fcntl.F_DUPFD, 10)
            write_end = fcntl.fcntl(replies_write, fcntl.F_DUPFD, 10)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)

        self._log = open(os.path.join(self._profile, "stderr.log"), "wb")
        self.process = subprocess.Popen([self.executable, *FLAGS, f"--user-data-dir={self._profile}", "about:blank"],
                                        stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
                                        close_fds=False, preexec_fn=on_fds_3_and_4)
        os.close(commands_read)
        os.close(replies_write)
        try:
            target = self.send("Target.createTarget", {"url": "about:blank"}, session=False,
                               timeout=start_timeout)["targetId"]
            self._session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                      session=False)["sessionId"]
            for domain in ("Page", "Runtime", "Log"):
                self.send(f"{domain}.enable")
        except BaseException:
            self.close()
            raise

    @staticmethod
    def find() -> str | None:
        named = os.environ.get("KANALYZE_CHROMIUM")
        if named:
            return shutil.which(named)
        return next((path for name in EXECUTABLES if (path := shutil.which(name))), None)

    # --- the protocol ---------------------------------------------------------------------

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._replies], [], [], left)[0]:
                raise BrowserError(f"Chromium did not answer in time ({self.timeout:g} s a command, longer for "
                                   f"the first): {self._stderr_tail()}")
            chunk = os.read(self._replies, 1 << 16)
            if not chunk:
                raise BrowserError(f"Chromium closed the pipe: {self._stderr_tail()}")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def _note(self, event: dict) -> None:
        """Keep an event; record what counts as an error of the page."""
        self._events.append(event)
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.errors.append("exception: " + str(details.get("exception", {}).get("description")
                                                   or details.get("text")))
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append("console: " + " ".join(str(a.get("value", a.get("description")))
                                                      for a in params.get("args", [])))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            self.errors.append(f"log ({entry.get('source')}): {entry.get('text')} {entry.get('url', '')}".strip())

    def send(self, method: str, params: dict | None = None, session: bool = True,
             timeout: float | None = None) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self._session:
            message["sessionId"] = self._session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self._note(reply)

    def wait_for(self, method: str) -> dict:
        deadline = time.monotonic() + self.timeout
        while True:
            for index, event in enumerate(self._events):
                if event.get("method") == method:
                    return self._events.pop(index)
            event = self._read_message(deadline)
            if "method" in event:
                self._note(event)

    # --- what a test does -----------------------------------------------------------------

    def open(self, url: str) -> None:
        """Navigate and wait for the load event, then for the page's scripts to have run."""
        self._events.clear()
        result = self.send("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise BrowserError(f"cannot open {url}: {result['errorText']}")
        self.wait_for("Page.loadEventFired")
        self.evaluate("new Promise(done => requestAnimationFrame(() => setTimeout(done, 0)))")

    def evaluate(self, expression: str):
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True})
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def click(self, selector: str, navigates: bool = False) -> None:
        """A left click with the mouse at the middle of the element (scrolled into view first);
        with `navigates`, wait for the page it opens to load."""
        self._events.clear()
        box = self.evaluate(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
                            "if (!e) return null; e.scrollIntoView({block: 'center'}); "
                            "const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        if box is None:
            raise BrowserError(f"nothing on the page matches {selector}")
        x, y = box
        self.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1})
        if navigates:
            self.wait_for("Page.loadEventFired")

    def screenshot(self, path: str) -> None:
        data = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})["data"]
        with open(path, "wb") as handle:
            handle.write(base64.b64decode(data))

    def _stderr_tail(self) -> str:
        self._log.flush()
        with open(self._log.name, "rb") as handle:
            return handle.read()[-2000:].decode("utf-8", "replace")

    def close(self) -> None:
        try:
            self.send("Browser.close", session=False)
        except (BrowserError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self._commands, self._replies):
            try:
                os.close(fd)
            except OSError:
                pass
        self._log.close()
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
