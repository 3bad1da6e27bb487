"""The Python interpreter of the conformance cases (../cases, format in ../README.md).

Loading, ``$ref`` substitution, the matching rule and the step loop, over the
generated gRPC stub (``windlass.memory.v1``); plus the processes a run needs:
the compiled ``windlass-memory`` command, a scripted OpenAI-compatible model
server, ``redis-server`` and PostgreSQL. The TypeScript (../suite.ts) and Go runners
implement the same rules; keep the three in step.
"""

from __future__ import annotations

import json
import os
import pwd
import queue
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Optional

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message

from windlass.memory.v1 import memory_pb2, memory_pb2_grpc

Json = Any
JsonObject = dict[str, Any]

HERE = Path(__file__).resolve().parent
CASES_DIR = HERE.parent / "cases"
REPO_ROOT = HERE.parents[2]
LISTENING = re.compile(r"gRPC [^\s,]+:(\d+), Connect/gRPC-Web/JSON http://[^\s:]+:(\d+)")
STORES = ("memory", "sqlite", "redis", "postgres", "redis-cluster")


@dataclass
class Case:
    name: str
    description: str
    server_flags: list[str]
    steps: list[JsonObject]
    # Environment variables of the case's server, on top of the runner's own.
    server_env: dict[str, str] = field(default_factory=dict)
    # The bearer token of every call and watch step without its own "token".
    token: Optional[str] = None

    @property
    def server_key(self) -> str:
        """Cases with equal flags and equal environments share a server."""
        return json.dumps([self.server_flags, self.server_env], sort_keys=True)


def reset_tokens(env: dict[str, str]) -> list[Optional[str]]:
    """The tokens the reset before a case sends Clear {all: true} with: one
    token per namespace of the server's WINDLASS_AUTH_TOKENS (the first token
    of each), or a single call without a token when auth is off."""
    raw = env.get("WINDLASS_AUTH_TOKENS", "")
    if raw == "":
        return [None]
    by_namespace: dict[str, str] = {}
    for pair in raw.split(","):
        token, _, namespace = pair.partition("=")
        by_namespace.setdefault(namespace.strip(), token.strip())
    return list(by_namespace.values())


def load_cases(directory: Path = CASES_DIR) -> list[Case]:
    """Every case of every file in cases/, in file-name then file order."""
    out: list[Case] = []
    names: set[str] = set()
    for path in sorted(directory.glob("*.json")):
        doc = json.loads(path.read_text("utf-8"))
        for raw in doc["cases"]:
            name = raw["name"]
            if not re.fullmatch(r"[a-z0-9-]+", name) or name in names:
                raise ValueError(f"{path.name}: bad or duplicate case name {name!r}")
            names.add(name)
            env = raw.get("serverEnv", {})
            if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
                raise ValueError(f"{name}: serverEnv must be an object of strings")
            token = raw.get("token")
            if token is not None and not isinstance(token, str):
                raise ValueError(f"{name}: token must be a string")
            out.append(
                Case(
                    name=name,
                    description=raw.get("description", ""),
                    server_flags=list(raw.get("serverFlags", [])),
                    steps=list(raw["steps"]),
                    server_env=dict(env),
                    token=token,
                )
            )
    return out


def stores_from_env() -> list[str]:
    raw = os.environ.get("CONFORMANCE_STORES") or ",".join(STORES)
    stores = [s.strip() for s in raw.split(",") if s.strip()]
    for s in stores:
        if s not in STORES:
            raise ValueError(f"CONFORMANCE_STORES: unknown store {s} ({', '.join(STORES)})")
    return stores


# ---------------------------------------------------------------- matching

_ABSENT = object()


def _show(v: object) -> str:
    return "absent" if v is _ABSENT else json.dumps(v, ensure_ascii=False)


def _numeric(v: object) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return True
    if isinstance(v, float):
        return v.is_integer()
    return isinstance(v, str) and re.fullmatch(r"\d+", v) is not None


def _decimal(v: object) -> str:
    return str(int(v)) if isinstance(v, float) else str(v)


def match(expected: Json, actual: object, path: str = "$") -> Optional[str]:
    """The README's matching rule: None when it matches, else what differs and where."""
    if expected is None:
        return None if actual is _ABSENT or actual is None else f"{path}: expected absent, got {_show(actual)}"
    if isinstance(expected, dict):
        keys = list(expected)
        op = keys[0] if len(keys) == 1 and keys[0].startswith("$") else None
        if op == "$contains":
            text = expected[op]
            if isinstance(actual, str) and isinstance(text, str) and text in actual:
                return None
            return f"{path}: expected a string containing {_show(text)}, got {_show(actual)}"
        if op == "$nonEmpty":
            if actual is _ABSENT or actual is None or actual in ("", [], {}):
                return f"{path}: expected a non-empty value, got {_show(actual)}"
            return None
        if op == "$not":
            if match(expected[op], actual, path) is None:
                return f"{path}: expected anything but {_show(expected[op])}, got {_show(actual)}"
            return None
        if op is not None:
            return f"{path}: unknown operator {op}"
        if not isinstance(actual, dict):
            return f"{path}: expected an object, got {_show(actual)}"
        for key in keys:
            diff = match(expected[key], actual.get(key, _ABSENT), f"{path}.{key}")
            if diff is not None:
                return diff
        return None
    if isinstance(expected, list):
        items = [] if actual is _ABSENT else actual
        if not isinstance(items, list):
            return f"{path}: expected a list, got {_show(actual)}"
        if len(items) != len(expected):
            return f"{path}: expected {len(expected)} elements, got {len(items)}: {_show(items)}"
        for i, (e, a) in enumerate(zip(expected, items)):
            diff = match(e, a, f"{path}[{i}]")
            if diff is not None:
                return diff
        return None
    if actual is _ABSENT:
        if expected is False or expected == "" or expected == "0" or (_numeric(expected) and _decimal(expected) == "0"):
            return None
        return f"{path}: expected {_show(expected)}, got absent"
    if _numeric(expected) and _numeric(actual):
        return None if _decimal(expected) == _decimal(actual) else f"{path}: expected {_show(expected)}, got {_show(actual)}"
    if type(expected) is not type(actual) or expected != actual:
        return f"{path}: expected {_show(expected)}, got {_show(actual)}"
    return None


def match_error(expected: JsonObject, code: str, message: str) -> Optional[str]:
    if code != expected["code"]:
        return f"expected {expected['code']}, got {code}: {message}"
    f = expected.get("field")
    if isinstance(f, str) and not message.startswith(f"{f}:"):
        return f"expected the message to start with {f + ':'!r}, got {message!r}"
    for text in expected.get("messageContains", []):
        if text not in message:
            return f"expected the message to contain {text!r}, got {message!r}"
    return None


def resolve_refs(value: Json, saved: dict[str, Json]) -> Json:
    """The request with every {"$ref": "name.path"} replaced by the saved value."""
    if isinstance(value, list):
        return [resolve_refs(v, saved) for v in value]
    if not isinstance(value, dict):
        return value
    ref = value.get("$ref")
    if isinstance(ref, str) and len(value) == 1:
        name, *parts = ref.split(".")
        if name not in saved:
            raise LookupError(f"$ref {ref}: nothing saved as {name}")
        cur: Json = saved[name]
        for part in parts:
            if isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
                cur = cur[int(part)]
            elif isinstance(cur, dict) and part in cur:
                cur = cur[part]
            else:
                raise LookupError(f"$ref {ref}: {part} is absent")
        return cur
    return {k: resolve_refs(v, saved) for k, v in value.items()}


# ---------------------------------------------------------------- clients


@dataclass
class Outcome:
    ok: bool
    value: JsonObject = field(default_factory=dict)
    code: str = ""
    message: str = ""


@dataclass
class StreamRead:
    kind: str  # "event" | "error" | "ended" | "timeout"
    event: JsonObject = field(default_factory=dict)
    code: str = ""
    message: str = ""


_REQUESTS: dict[str, tuple[type[Message], str]] = {
    "Add": (memory_pb2.AddRequest, "Add"),
    "Get": (memory_pb2.GetRequest, "Get"),
    "Clear": (memory_pb2.ClearRequest, "Clear"),
    "ListThreads": (memory_pb2.ListThreadsRequest, "ListThreads"),
    "Rewind": (memory_pb2.RewindRequest, "Rewind"),
    "Fork": (memory_pb2.ForkRequest, "Fork"),
}


def to_json(message: Message) -> JsonObject:
    value: JsonObject = json_format.MessageToDict(message)
    return value


class WatchStream:
    """A Watch call read by a thread into a queue, so next() can time out."""

    def __init__(self, call: Any) -> None:
        self._call = call
        self._queue: queue.Queue[StreamRead] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        try:
            for event in self._call:
                self._queue.put(StreamRead("event", event=to_json(event)))
            self._queue.put(StreamRead("ended"))
        except grpc.RpcError as err:
            self._queue.put(StreamRead("error", code=err.code().name, message=err.details() or ""))

    def next(self, timeout_ms: float) -> StreamRead:
        try:
            return self._queue.get(timeout=max(timeout_ms, 1) / 1000)
        except queue.Empty:
            return StreamRead("timeout")

    def cancel(self) -> None:
        self._call.cancel()


def _metadata(token: Optional[str]) -> Optional[list[tuple[str, str]]]:
    """`authorization: Bearer <token>`, or no metadata without a token."""
    return None if token is None else [("authorization", f"Bearer {token}")]


class GrpcClient:
    """MemoryService over grpcio, taking and returning proto3 JSON."""

    def __init__(self, grpc_port: int) -> None:
        self._channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
        # memory_pb2_grpc is generated without type annotations.
        self._stub = memory_pb2_grpc.MemoryServiceStub(self._channel)  # type: ignore[no-untyped-call]

    def unary(
        self, method: str, request: JsonObject, timeout_ms: Optional[float] = None, token: Optional[str] = None
    ) -> Outcome:
        request_type, name = _REQUESTS[method]
        message = json_format.ParseDict(request, request_type())
        timeout = None if timeout_ms is None else timeout_ms / 1000
        try:
            response = getattr(self._stub, name)(message, timeout=timeout, metadata=_metadata(token))
        except grpc.RpcError as err:
            return Outcome(False, code=err.code().name, message=err.details() or "")
        return Outcome(True, value=to_json(response))

    def watch(
        self, request: JsonObject, timeout_ms: Optional[float] = None, token: Optional[str] = None
    ) -> WatchStream:
        message = json_format.ParseDict(request, memory_pb2.WatchRequest())
        timeout = None if timeout_ms is None else timeout_ms / 1000
        return WatchStream(self._stub.Watch(message, timeout=timeout, metadata=_metadata(token)))

    def close(self) -> None:
        self._channel.close()


# ---------------------------------------------------------------- fake model


class FakeModel:
    """A scripted OpenAI-compatible Chat Completions server on a free port.

    Steps are consumed in order; once the script is used up the reply is
    "summary #N", N being the requests since the last reset.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._script: list[JsonObject] = []
        self._count = 0
        # Held steps wait for the case's release; each case starts with a new gate.
        self._released = threading.Event()
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.path.split("?")[0] != "/v1/chat/completions":
                    return self._send(404, {"error": {"message": "no route", "type": "invalid_request_error"}})
                try:
                    request = json.loads(body)
                    ok = isinstance(request.get("model"), str) and isinstance(request.get("messages"), list)
                except (ValueError, AttributeError):
                    ok = False
                if not ok:
                    return self._send(400, {"error": {"message": "not a chat completion request"}})
                step, released = model._take()
                delay = step.get("delayMs")
                if isinstance(delay, (int, float)):
                    time.sleep(delay / 1000)
                if step.get("held") is True:
                    released.wait(timeout=600)
                if "reply" in step:
                    return self._send(200, _completion(request["model"], str(step["reply"])))
                if "status" in step:
                    return self._send(int(step["status"]), {"error": {"message": "fake failure", "type": "server_error"}})
                self._send_raw(200, b"<html>this is not JSON")

            def _send(self, status: int, value: object) -> None:
                self._send_raw(status, json.dumps(value).encode())

            def _send_raw(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def _take(self) -> tuple[JsonObject, threading.Event]:
        with self._lock:
            self._count += 1
            step = self._script.pop(0) if self._script else {"reply": f"summary #{self._count}"}
            return step, self._released

    def reset(self) -> None:
        with self._lock:
            self._script.clear()
            self._count = 0
            self._released.set()  # whatever a failed case left held
            self._released = threading.Event()

    def release(self) -> None:
        """Lets held replies go: those waiting now and those taken later in the case."""
        with self._lock:
            self._released.set()

    def push(self, steps: list[JsonObject]) -> None:
        for step in steps:
            if not ({"reply", "status", "malformed"} & step.keys()):
                raise ValueError(f"unknown model step {step}")
        with self._lock:
            self._script.extend(steps)

    def requests(self) -> int:
        with self._lock:
            return self._count

    def pending(self) -> int:
        with self._lock:
            return len(self._script)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _completion(model: str, content: str) -> JsonObject:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


# ---------------------------------------------------------------- processes


def require_tool(name: str, hint: str) -> str:
    """The tool's path; a missing tool is an error, never a skip (CI=true must fail)."""
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} is not installed: {hint}")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """The compiled `windlass-memory serve` on free ports, with its own fake model."""

    def __init__(self, store: str, flags: list[str], env: Optional[dict[str, str]] = None) -> None:
        main_js = REPO_ROOT / "dist" / "src" / "main.js"
        if not main_js.exists():
            raise RuntimeError(f"{main_js} is missing: run npm run build first")
        node = require_tool("node", "install Node 24 (source scripts/use-node.sh)")
        self.model = FakeModel()
        self._client: Optional[GrpcClient] = None
        self._stderr = tempfile.TemporaryFile()
        args = [
            node, str(REPO_ROOT / "bin" / "windlass-memory.js"), "serve",
            "--host", "127.0.0.1", "--port", "0", "--http-port", "0",
            "--summarizer", "openai", "--openai-base-url", self.model.base_url,
            "--openai-max-retries", "0", "--progress-interval-ms", "100", "--log-level", "error",
            "--store", store, *flags,
        ]  # fmt: skip
        self._proc = subprocess.Popen(
            args,
            cwd=REPO_ROOT,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        lines: queue.Queue[str] = queue.Queue()

        def drain() -> None:
            assert self._proc.stdout is not None
            for line in self._proc.stdout:
                lines.put(line)
            lines.put("")

        threading.Thread(target=drain, daemon=True).start()
        deadline = time.monotonic() + 30
        while True:
            try:
                line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                line = ""
            m = LISTENING.search(line)
            if m is not None:
                self.grpc_port, self.http_port = int(m.group(1)), int(m.group(2))
                return
            if line == "" or time.monotonic() > deadline:
                if self._proc.poll() is None:
                    self._proc.kill()
                self._proc.wait()
                self._stderr.seek(0)
                log = self._stderr.read().decode()[-4000:]
                self.stop()
                raise RuntimeError(f"windlass-memory did not start: {log}")

    @property
    def client(self) -> GrpcClient:
        """One gRPC channel per server, opened on first use."""
        if self._client is None:
            self._client = GrpcClient(self.grpc_port)
        return self._client

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self.model.close()
        self._stderr.close()


class RedisServer:
    """redis-server on a free port without persistence, in a temporary directory."""

    def __init__(self) -> None:
        binary = os.environ.get("REDIS_SERVER") or require_tool(
            "redis-server", "apt-get install redis-server (.ci/run does), or set REDIS_SERVER"
        )
        self._dir = tempfile.TemporaryDirectory(prefix="windlass-redis-")
        self.port = free_port()
        self._proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self._dir.name, "--protected-mode", "no", "--loglevel", "warning"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while not self._pings():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.02)

    def _pings(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(timeout=10)
        self._dir.cleanup()


class RedisCluster:
    """Six cluster-enabled redis-server (three primaries, a replica each) on free ports without
    persistence, joined by redis-cli --cluster create, as test/support/redis-cluster.ts starts them."""

    def __init__(self) -> None:
        binary = os.environ.get("REDIS_SERVER") or require_tool(
            "redis-server", "apt-get install redis-server (.ci/run does), or set REDIS_SERVER"
        )
        cli = os.environ.get("REDIS_CLI") or require_tool(
            "redis-cli", "apt-get install redis-tools (.ci/run does), or set REDIS_CLI"
        )
        self._dir = tempfile.TemporaryDirectory(prefix="windlass-redis-cluster-")
        self.ports = [free_port() for _ in range(6)]
        self._procs = []
        for port in self.ports:
            node_dir = os.path.join(self._dir.name, str(port))
            os.mkdir(node_dir)
            self._procs.append(subprocess.Popen(
                [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", node_dir, "--protected-mode", "no", "--loglevel", "warning",
                 "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                 # The bus port is the port + 10000 unless set: above 55535 no port at all.
                 "--cluster-port", str(free_port()),
                 "--cluster-node-timeout", "1000", "--shutdown-timeout", "0"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            ))  # fmt: skip
        try:
            self._wait_for(lambda port: self._ask(port, b"PING").startswith(b"+PONG"), "answer PING")
            subprocess.run(
                [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports),
                 "--cluster-replicas", "1", "--cluster-yes"],
                check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60,
            )  # fmt: skip
            self._wait_for(lambda port: b"cluster_state:ok" in self._ask(port, b"CLUSTER INFO"), "say cluster_state:ok")
        except BaseException:
            self.stop()
            raise
        self.url = "redis-cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def _wait_for(self, holds: Callable[[int], bool], what: str) -> None:
        deadline = time.monotonic() + 30
        for port in self.ports:
            while not holds(port):
                if any(p.poll() is not None for p in self._procs) or time.monotonic() > deadline:
                    raise RuntimeError(f"redis cluster node {port} did not {what}")
                time.sleep(0.05)

    @staticmethod
    def _ask(port: int, command: bytes) -> bytes:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(command + b"\r\n")
                return s.recv(4096)
        except OSError:
            return b""

    def stop(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self._procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._dir.cleanup()


def postgres_bin_dir() -> Path:
    """The directory of initdb and postgres, found as test/support/postgres-server.ts
    finds it: POSTGRES_BIN, else `pg_config --bindir`, else the newest
    /usr/lib/postgresql/<version>/bin (Debian's, which is not on PATH)."""

    def has_binaries(d: Path) -> bool:
        return (d / "postgres").exists() and (d / "initdb").exists()

    given = os.environ.get("POSTGRES_BIN")
    if given is not None:
        # Named by the user: that directory or an error naming it, never another one.
        if has_binaries(Path(given)):
            return Path(given)
        raise RuntimeError(f"POSTGRES_BIN={given} holds no postgres and initdb")
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        probe = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
        if probe.returncode == 0:
            candidates.append(Path(probe.stdout.strip()))
    root = Path("/usr/lib/postgresql")
    if root.is_dir():
        versions = sorted((v for v in root.iterdir() if v.name.isdigit()), key=lambda v: -int(v.name))
        candidates.extend(v / "bin" for v in versions)
    for d in candidates:
        if has_binaries(d):
            return d
    looked = ", ".join(map(str, candidates)) or "no directory"
    # An error, never a skip: under CI=true a missing PostgreSQL must fail the run.
    raise RuntimeError(
        f"PostgreSQL's initdb and postgres were not found (looked in {looked}); install Debian's "
        "postgresql (apt-get install postgresql; .ci/run does) or set POSTGRES_BIN to their directory"
    )


class PostgresServer:
    """PostgreSQL on a free port of 127.0.0.1 in a temporary data directory, started
    as test/support/postgres-server.ts starts it; create_database() gives each
    windlass server a fresh database."""

    START_TIMEOUT_S = 30

    def __init__(self) -> None:
        self._bin = postgres_bin_dir()
        self._dir = tempfile.mkdtemp(prefix="windlass-postgres-")
        self._proc: Optional[subprocess.Popen[bytes]] = None
        # initdb and postgres refuse to run as root: as root, they run as the
        # postgres system user, which must own the directory they write in.
        self._user: Optional[str] = None
        if os.geteuid() == 0:
            try:
                entry = pwd.getpwnam("postgres")
            except KeyError:
                self._cleanup()
                raise RuntimeError("running as root, and there is no postgres user to run PostgreSQL as") from None
            os.chown(self._dir, entry.pw_uid, entry.pw_gid)
            self._user = "postgres"
        data = os.path.join(self._dir, "data")
        init = subprocess.run(
            [str(self._bin / "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8",
             "--locale", "C.UTF-8", "--no-sync"],
            cwd=self._dir,  # the postgres user may not be able to read the repository
            user=self._user, capture_output=True, text=True,
        )  # fmt: skip
        if init.returncode != 0:
            self._cleanup()
            raise RuntimeError(f"initdb failed: {init.stderr}")
        for attempt in range(1, 6):
            self.port = free_port()
            try:
                self._launch(data)
                return
            except _PortInUse:
                # free_port() closes its socket before postgres binds: another
                # process may take the port in between; another port then.
                if attempt == 5:
                    self.stop()
                    raise
            except BaseException:
                self.stop()
                raise

    def _launch(self, data: str) -> None:
        log_path = os.path.join(self._dir, "postgres.log")
        with open(log_path, "wb") as log:
            self._proc = subprocess.Popen(
                [str(self._bin / "postgres"), "-D", data, "-p", str(self.port), "-k", self._dir,
                 "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300",
                 "-c", "shared_buffers=32MB"],
                cwd=self._dir, user=self._user,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + self.START_TIMEOUT_S
        while not self._ready():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                if self._proc.poll() is None:
                    self._proc.kill()
                self._proc.wait()
                self._proc = None
                output = Path(log_path).read_text(errors="replace")[-4000:]
                if re.search(r"address already in use", output, re.IGNORECASE):
                    raise _PortInUse(f"port {self.port} is taken")
                raise RuntimeError(f"postgres did not start on port {self.port}: {output.strip()}")
            time.sleep(0.05)

    def _ready(self) -> bool:
        """pg_isready: 0 once the server accepts connections (not while it starts up)."""
        probe = subprocess.run(
            [str(self._bin / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
             "-d", "postgres", "-t", "1"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        return probe.returncode == 0

    def create_database(self) -> str:
        """A new, empty database on this server: its URL."""
        name = f"w_{os.urandom(6).hex()}"
        made = subprocess.run(
            [str(self._bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name],
            stdin=subprocess.DEVNULL, capture_output=True, text=True,
        )  # fmt: skip
        if made.returncode != 0:
            raise RuntimeError(f"createdb {name} failed: {made.stderr}")
        return f"postgres://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            # Immediate shutdown: the data is removed next, so no shutdown checkpoint is owed.
            self._proc.send_signal(signal.SIGQUIT)
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        self._cleanup()

    def _cleanup(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)


class _PortInUse(RuntimeError):
    pass


class ServerPool:
    """One server per (store, flag set, environment), started on first use and stopped by close()."""

    def __init__(self) -> None:
        self._servers: dict[tuple[str, str], ServerProcess] = {}
        self._redis: Optional[RedisServer] = None
        self._postgres: Optional[PostgresServer] = None
        self._cluster: Optional[RedisCluster] = None
        self._sqlite_dir: Optional[tempfile.TemporaryDirectory[str]] = None

    def get(self, store: str, case: Case) -> ServerProcess:
        key = (store, case.server_key)
        if key not in self._servers:
            index = sum(1 for s, _ in self._servers if s == store)
            flags = list(case.server_flags)
            if store == "redis-cluster":
                # Each namespace split over the cluster's three primaries (README "Namespace shards").
                flags += ["--redis-namespace-shards", "3"]
            self._servers[key] = ServerProcess(self._store_spec(store, index), flags, case.server_env)
        return self._servers[key]

    def _store_spec(self, store: str, index: int) -> str:
        if store == "memory":
            return "memory"
        if store == "sqlite":
            if self._sqlite_dir is None:
                self._sqlite_dir = tempfile.TemporaryDirectory(prefix="windlass-conformance-")
            return f"sqlite:{self._sqlite_dir.name}/server-{index}.db"
        if store == "postgres":
            if self._postgres is None:
                self._postgres = PostgresServer()
            # A fresh database per server, so servers of one store never share state.
            return self._postgres.create_database()
        if store == "redis-cluster":
            if self._cluster is None:
                self._cluster = RedisCluster()
            # A cluster has one database: its servers share it, and the cases, which run one at
            # a time and each start with Clear {all: true}, never meet.
            return self._cluster.url
        if self._redis is None:
            self._redis = RedisServer()
        # One database per server, so servers of one store never share state.
        return f"redis://127.0.0.1:{self._redis.port}/{index}"

    def close(self) -> None:
        for server in self._servers.values():
            server.stop()
        self._servers.clear()
        if self._redis is not None:
            self._redis.stop()
        if self._postgres is not None:
            self._postgres.stop()
        if self._cluster is not None:
            self._cluster.stop()
        if self._sqlite_dir is not None:
            self._sqlite_dir.cleanup()


# ---------------------------------------------------------------- the step loop


class CaseFailed(AssertionError):
    pass


def run_case(case: Case, client: GrpcClient, model: FakeModel) -> None:
    """Runs one case's steps in order; raises CaseFailed naming the step at the first failure."""
    saved: dict[str, Json] = {}
    streams: dict[str, WatchStream] = {}
    model.reset()
    for token in reset_tokens(case.server_env):
        cleared = client.unary("Clear", {"all": True}, token=token)
        if not cleared.ok:
            raise CaseFailed(f"Clear all before the case: {cleared.code}: {cleared.message}")
    try:
        for i, step in enumerate(case.steps):
            try:
                _run_step(step, case, client, model, saved, streams)
            except (CaseFailed, LookupError, ValueError, json_format.ParseError) as err:
                raise CaseFailed(f"{case.name} step {i + 1} {json.dumps(step)[:160]}: {err}") from err
        if model.pending() > 0:
            raise CaseFailed(f"{case.name}: {model.pending()} scripted model steps were never consumed")
    finally:
        for stream in streams.values():
            stream.cancel()


def _check_outcome(expect: Optional[JsonObject], outcome: Outcome) -> Optional[str]:
    if expect is not None and "error" in expect:
        if outcome.ok:
            return f"expected {expect['error']['code']}, got a response {json.dumps(outcome.value)}"
        return match_error(expect["error"], outcome.code, outcome.message)
    if not outcome.ok:
        return f"expected a response, got {outcome.code}: {outcome.message}"
    if expect is not None and "response" in expect:
        return match(expect["response"], outcome.value)
    return None


def _describe(read: StreamRead) -> str:
    if read.kind == "event":
        return f"the event {json.dumps(read.event)}"
    if read.kind == "error":
        return f"{read.code}: {read.message}"
    return "the end of the stream" if read.kind == "ended" else "nothing in time"


def _token(step: JsonObject, case: Case) -> Optional[str]:
    """The step's bearer token: its own "token" (null: none), else the case's."""
    token = step["token"] if "token" in step else case.token
    if token is not None and not isinstance(token, str):
        raise CaseFailed("token must be a string or null")
    return token


def _run_step(
    step: JsonObject,
    case: Case,
    client: GrpcClient,
    model: FakeModel,
    saved: dict[str, Json],
    streams: dict[str, WatchStream],
) -> None:
    if "call" in step:
        if step["call"] not in _REQUESTS:
            raise CaseFailed(f"unknown call {step['call']}")
        request = resolve_refs(step.get("request", {}), saved)
        timeout_ms = step.get("timeoutMs")
        token = _token(step, case)
        for _ in range(int(step.get("repeat", 1))):
            poll_until = time.monotonic() + step.get("pollMs", 0) / 1000
            while True:
                started = time.monotonic()
                outcome = client.unary(step["call"], request, timeout_ms, token)
                elapsed = (time.monotonic() - started) * 1000
                if "maxElapsedMs" in step and elapsed > step["maxElapsedMs"]:
                    raise CaseFailed(f"took {elapsed:.0f} ms, more than {step['maxElapsedMs']}")
                diff = _check_outcome(step.get("expect"), outcome)
                if diff is None:
                    if isinstance(step.get("as"), str) and outcome.ok:
                        saved[step["as"]] = outcome.value
                    break
                if time.monotonic() >= poll_until:
                    raise CaseFailed(diff)
                time.sleep(0.05)
        return
    if "watch" in step:
        request = resolve_refs(step.get("request", {}), saved)
        token = _token(step, case)
        if step["watch"] in streams:
            streams[step["watch"]].cancel()
        streams[step["watch"]] = client.watch(request, step.get("timeoutMs"), token)
        return
    if "next" in step:
        stream = streams.get(step["next"])
        if stream is None:
            raise CaseFailed(f"no stream named {step['next']}")
        within_ms = step.get("withinMs", 5000)
        if "error" in step:
            until = time.monotonic() + within_ms / 1000
            while True:
                read = stream.next((until - time.monotonic()) * 1000)
                if read.kind == "error":
                    diff = match_error(step["error"], read.code, read.message)
                    if diff is not None:
                        raise CaseFailed(diff)
                    return
                if read.kind == "event" and isinstance(read.event.get("progress"), dict):
                    continue
                raise CaseFailed(f"expected {step['error']['code']}, got {_describe(read)}")
        names: list[Optional[str]] = step.get("as", [])
        for k, expected in enumerate(resolve_refs(step["events"], saved)):
            wants_progress = isinstance(expected, dict) and "progress" in expected
            until = time.monotonic() + within_ms / 1000
            skipped = ""
            while True:
                read = stream.next((until - time.monotonic()) * 1000)
                if read.kind != "event":
                    raise CaseFailed(f"event {k + 1}: expected an event, got {_describe(read)}{skipped}")
                is_progress = isinstance(read.event.get("progress"), dict)
                if not wants_progress and is_progress:
                    continue
                diff = match(expected, read.event)
                if diff is not None and wants_progress and is_progress:
                    # A Progress that does not match an expected Progress is skipped.
                    skipped = f" (after skipping a Progress: {diff})"
                    continue
                if diff is not None:
                    raise CaseFailed(f"event {k + 1}: {diff} in {json.dumps(read.event)}")
                if k < len(names) and isinstance(names[k], str):
                    saved[str(names[k])] = read.event
                break
        return
    if "cancel" in step:
        stream = streams.pop(step["cancel"], None)
        if stream is None:
            raise CaseFailed(f"no stream named {step['cancel']}")
        stream.cancel()
        return
    if "model" in step:
        model.push(list(step["model"]))
        return
    if step.get("modelRelease") is True:
        model.release()
        return
    if "modelRequests" in step:
        got = model.requests()
        if got != step["modelRequests"]:
            raise CaseFailed(f"expected {step['modelRequests']} model requests, got {got}")
        return
    raise CaseFailed("unknown step")

