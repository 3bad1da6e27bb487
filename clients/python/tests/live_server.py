"""A live windlass-memory server, and a fake OpenAI-compatible model, for tests.

Shared by the tests of clients/python and of the framework adapters beside it
(their pytest configuration puts this folder on the path).

The server is the real command (`node bin/windlass-memory.js serve`) on free
ports, built beforehand with `npm run build`. The model is a real HTTP server
speaking the Chat Completions protocol with scripted replies: the original
module's FakeLLM, over the wire.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
COMMAND = REPO_ROOT / "bin" / "windlass-memory.js"
READY_PREFIX = "windlass-memory listening: gRPC "
START_TIMEOUT_S = 30.0


@dataclass
class Server:
    """A running windlass-memory process."""

    process: subprocess.Popen[str]
    target: str
    log_path: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        assert self.process.stdout is not None
        self.process.stdout.close()


def start_server(
    log_path: Path, *args: str, env: dict[str, str] | None = None, port: int = 0
) -> Server:
    """Starts the server (gRPC on ``port``, 0: a free one) and waits for its "listening" line."""
    if not (REPO_ROOT / "dist").is_dir():
        pytest.fail("the server is not built: run `npm run build` at the repository root")
    # The server reads WINDLASS_* settings from the environment: start from
    # none of the caller's, so the tests see the defaults plus what they pass.
    environment = {k: v for k, v in os.environ.items() if not k.startswith("WINDLASS_")}
    environment.update(env or {})
    log = log_path.open("a")  # a restarted server appends to the same log
    process = subprocess.Popen(
        ["node", str(COMMAND), "serve", "--port", str(port), "--http-port", "0", *args],
        cwd=REPO_ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=log,  # JSON logs: kept for a failing test, never a full pipe
        text=True,
    )
    log.close()
    assert process.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT_S
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not selector.select(timeout=deadline - time.monotonic()):
                break
            line = process.stdout.readline()
            if line == "":
                break  # exited
            if line.startswith(READY_PREFIX):
                target = line[len(READY_PREFIX) :].split(",", 1)[0].strip()
                return Server(process, target, log_path)
    process.kill()
    process.wait()
    pytest.fail(f"windlass-memory did not start; its log:\n{log_path.read_text()}")


@dataclass
class FakeModel:
    """A scripted OpenAI-compatible Chat Completions endpoint.

    Replies are taken in order; the last one repeats. A reply that is an int
    is sent as that HTTP status with an error body.
    """

    replies: list[str | int]
    base_url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def next_reply(self, request: dict[str, Any]) -> str | int:
        with self._lock:
            self.requests.append(request)
            return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]


def model_handler(model: FakeModel) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            if self.path != "/v1/chat/completions":
                self._send(404, {"error": {"message": "not found"}})
                return
            request = json.loads(body)
            reply = model.next_reply(request)
            if isinstance(reply, int):
                self._send(reply, {"error": {"message": "scripted failure"}})
                return
            self._send(
                200,
                {
                    "id": f"chatcmpl-{len(model.requests)}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": request.get("model", ""),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": reply},
                            "finish_reason": "stop",
                        }
                    ],
                },
            )

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep pytest's output to the tests'

    return Handler


def python_blocks(markdown: Path) -> list[str]:
    """The ```python code blocks of a Markdown file, in order."""
    blocks: list[str] = []
    current: list[str] | None = None
    for line in markdown.read_text().splitlines():
        if current is None:
            if line.strip() == "```python":
                current = []
        elif line.strip() == "```":
            blocks.append("\n".join(current) + "\n")
            current = None
        else:
            current.append(line)
    assert current is None, f"{markdown}: a code block is not closed"
    return blocks


def run_snippet(code: str, target: str, cwd: Path, timeout_s: float = 120.0) -> str:
    """Runs a snippet as a reader would (``python file.py``) against ``target``; returns stdout."""
    script = cwd / "snippet.py"
    script.write_text(code)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("WINDLASS_")}
    environment["WINDLASS_MEMORY_TARGET"] = target
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    if done.returncode != 0:
        pytest.fail(f"the snippet failed ({done.returncode}):\n{code}\n--- stderr:\n{done.stderr}")
    return done.stdout
