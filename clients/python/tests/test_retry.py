"""Retries on UNAVAILABLE store a message once: every Add carries a request_id.

A TCP proxy between the client and a live server reads the HTTP/2 frames
going by. It records every AddRequest the client sends (decoded from the
gRPC messages in DATA frames), and it can cut the connection at the moment
the server's response to an Add starts (its HEADERS frame): the server has
stored the Add, the client never hears so, fails the attempt with
UNAVAILABLE and retries it.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from windlass.memory.v1 import memory_pb2

from conftest import Server
from windlass_memory import BufferMemory, Message, SummaryMemory, WindowMemory

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
FRAME_HEADER = 9
DATA, HEADERS = 0x0, 0x1
PADDED = 0x8


def frames(buffer: bytearray) -> Iterator[tuple[int, int, int, bytes]]:
    """Takes the complete frames off the front of ``buffer``: (type, flags, stream, payload)."""
    while len(buffer) >= FRAME_HEADER:
        length = int.from_bytes(buffer[0:3], "big")
        if len(buffer) < FRAME_HEADER + length:
            return
        kind, flags = buffer[3], buffer[4]
        stream = struct.unpack(">I", bytes(buffer[5:9]))[0] & 0x7FFFFFFF
        payload = bytes(buffer[FRAME_HEADER : FRAME_HEADER + length])
        del buffer[: FRAME_HEADER + length]
        yield kind, flags, stream, payload


@dataclass
class ResponseCuttingProxy:
    """Forwards 127.0.0.1 connections to ``target``; see the module's docstring.

    ``cut_responses`` is how many Add responses to cut before letting them
    through.
    """

    target: str
    cut_responses: int = 0
    adds: list[memory_pb2.AddRequest] = field(default_factory=list)
    cut: int = 0
    connections: int = 0
    address: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _listener: socket.socket | None = None

    def start(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            host, port = self.target.rsplit(":", 1)
            upstream = socket.create_connection((host, int(port)))
            with self._lock:
                self.connections += 1
            pair = (client, upstream)
            threading.Thread(target=self._requests, args=pair, daemon=True).start()
            threading.Thread(target=self._responses, args=pair, daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket) -> None:
        """Client to server: forwarded as read; AddRequests decoded on the side."""
        buffer = bytearray()
        preface_left = len(PREFACE)
        messages: dict[int, bytearray] = {}
        while data := _recv(client):
            if not _send(upstream, data):
                break
            buffer += data
            if preface_left:
                skipped = min(preface_left, len(buffer))
                del buffer[:skipped]
                preface_left -= skipped
            for kind, flags, stream, payload in frames(buffer):
                if kind != DATA:
                    continue
                if flags & PADDED:
                    payload = payload[1 : len(payload) - payload[0]]
                pending = messages.setdefault(stream, bytearray())
                pending += payload
                # gRPC framing: compressed flag (1 byte), length (4 bytes), message.
                while len(pending) >= 5 and len(pending) >= 5 + int.from_bytes(pending[1:5], "big"):
                    size = int.from_bytes(pending[1:5], "big")
                    assert pending[0] == 0, "the client compressed a message"
                    request = memory_pb2.AddRequest.FromString(bytes(pending[5 : 5 + size]))
                    del pending[: 5 + size]
                    with self._lock:
                        self.adds.append(request)
        _close(client, upstream)

    def _responses(self, client: socket.socket, upstream: socket.socket) -> None:
        """Server to client: forwarded frame by frame, unless the frame is a response to cut."""
        buffer = bytearray()
        while data := _recv(upstream):
            buffer += data
            for kind, flags, stream, payload in frames(buffer):
                if kind == HEADERS and stream != 0:
                    with self._lock:
                        cutting = self.cut < self.cut_responses
                        if cutting:
                            self.cut += 1
                    if cutting:
                        # The server has answered: the Add is stored. The
                        # client sees its connection drop instead.
                        _close(client, upstream)
                        return
                header = len(payload).to_bytes(3, "big") + bytes([kind, flags])
                if not _send(client, header + struct.pack(">I", stream) + payload):
                    _close(client, upstream)
                    return
        _close(client, upstream)


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def _send(sock: socket.socket, data: bytes) -> bool:
    try:
        sock.sendall(data)
        return True
    except OSError:
        return False


def _close(*socks: socket.socket) -> None:
    for sock in socks:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()


@pytest.fixture
def proxy(fresh_server: Server) -> Iterator[ResponseCuttingProxy]:
    running = ResponseCuttingProxy(target=fresh_server.target)
    running.start()
    yield running
    running.close()


@pytest.mark.parametrize("call", ["add", "aadd", "openai dict"])
def test_an_add_retried_after_its_response_was_lost_is_stored_once(
    fresh_server: Server, proxy: ResponseCuttingProxy, call: str
) -> None:
    proxy.cut_responses = 1
    thread = f"retry-{uuid.uuid4().hex}"
    with BufferMemory(target=proxy.address, timeout=20) as through_proxy:
        if call == "add":
            through_proxy.add(Message.user("only once"), thread_id=thread)
        elif call == "aadd":
            asyncio.run(through_proxy.aadd(Message.user("only once"), thread_id=thread))
        else:
            through_proxy.add({"role": "user", "content": "only once"}, thread_id=thread)

    # The first attempt was stored and its answer lost; the client sent it again.
    assert proxy.cut == 1
    assert proxy.connections >= 2
    assert len(proxy.adds) == 2
    first, retry = proxy.adds
    assert first.request_id != ""
    assert retry.request_id == first.request_id
    assert retry.messages[0].content == first.messages[0].content == "only once"
    with BufferMemory(target=fresh_server.target) as direct:
        assert [m.content for m in direct.get(thread_id=thread)] == ["only once"]


def test_every_add_carries_its_own_request_id(
    fresh_server: Server, proxy: ResponseCuttingProxy
) -> None:
    thread = f"ids-{uuid.uuid4().hex}"
    memories = [
        BufferMemory(target=proxy.address),
        WindowMemory(window=3, target=proxy.address),
        SummaryMemory(window=3, summarize_every=50, target=proxy.address),
    ]
    sent = 0
    for index, memory in enumerate(memories):
        with memory:
            one = f"{thread}-{index}"
            memory.add(Message.user("one"), thread_id=one)
            memory.add([Message.user("two"), Message.assistant("three")], thread_id=one)
            asyncio.run(memory.aadd(Message.user("four"), thread_id=one))
            sent += 3
    assert len(proxy.adds) == sent
    ids = [add.request_id for add in proxy.adds]
    assert all(ids), ids
    assert len(set(ids)) == sent
