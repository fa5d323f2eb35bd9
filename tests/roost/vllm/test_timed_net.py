"""The HTTP/1.1 connections streams run on: framing undone in ``data_received`` whatever the network
split, arrival stamps per block, keep-alive reuse, and a kept-alive connection the server closed."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from roost.vllm.client import RequestBudget, VllmClient
from roost.vllm.timed_net import Connection, ConnectionPool, HttpError


class Sink:
    def __init__(self) -> None:
        self.head: tuple[int, str, dict[bytes, bytes]] | None = None
        self.body: list[tuple[bytes, float]] = []
        self.end: list[BaseException | None] = []

    def on_head(self, status: int, reason: str, headers: dict[bytes, bytes]) -> None:
        self.head = (status, reason, headers)

    def on_body(self, data: bytes, t: float) -> None:
        self.body.append((data, t))

    def on_end(self, error: BaseException | None) -> None:
        self.end.append(error)


class Ending(Sink):
    """A sink whose end resolves a future."""

    def __init__(self, done: asyncio.Future[BaseException | None]) -> None:
        super().__init__()
        self.done = done

    def on_end(self, error: BaseException | None) -> None:
        self.done.set_result(error)


class Wire:
    """A transport that keeps what was written."""

    def __init__(self) -> None:
        self.written = b""
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> Any:
        return None


def _conn() -> tuple[Connection, Sink]:
    conn = Connection()
    conn.connection_made(Wire())  # type: ignore[arg-type]
    sink = Sink()
    conn.start(b"POST / HTTP/1.1\r\n\r\n", sink)
    return conn, sink


EVENTS = (b'data: {"a":1}\n\n', b'data: {"b":22}\n\n')
CHUNKED = (
    b"HTTP/1.1 100 Continue\r\n\r\n"
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    + b"%x\r\n%s\r\n" % (len(EVENTS[0]), EVENTS[0])
    + b"%X;ext=1\r\n%s\r\n" % (len(EVENTS[1]), EVENTS[1])
    + b"0\r\nX-Trailer: y\r\n\r\n"
)


@pytest.mark.parametrize("step", [1, 2, 3, 7, len(CHUNKED)])
def test_chunked_body_is_the_same_however_the_bytes_arrive(step: int) -> None:
    conn, sink = _conn()
    for i in range(0, len(CHUNKED), step):
        conn.data_received(CHUNKED[i : i + step])
    assert sink.head is not None and sink.head[0] == 200 and sink.head[2][b"content-type"] == b"text/event-stream"
    assert b"".join(d for d, _ in sink.body) == b"".join(EVENTS)
    assert sink.end == [None] and conn.idle and conn.reusable
    times = [t for _, t in sink.body]
    assert times == sorted(times)  # each block carries its own arrival stamp


def test_one_block_is_one_call_with_its_arrival_time() -> None:
    conn, sink = _conn()
    head, rest = CHUNKED.split(b"\r\n\r\n", 2)[:2], CHUNKED.split(b"\r\n\r\n", 2)[2]
    conn.data_received(b"\r\n\r\n".join(head) + b"\r\n\r\n")
    before = time.perf_counter()
    conn.data_received(rest)
    ((data, t),) = sink.body
    assert data.count(b"data:") == 2 and before <= t <= time.perf_counter()


def test_content_length_and_until_close_bodies() -> None:
    conn, sink = _conn()
    conn.data_received(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 5\r\n\r\nhel")
    assert sink.end == []
    conn.data_received(b"lo")
    assert sink.head is not None and sink.head[:2] == (400, "Bad Request") and sink.end == [None]
    conn, sink = _conn()
    conn.data_received(b"HTTP/1.0 200 OK\r\n\r\nall of it")
    conn.eof_received()
    assert b"".join(d for d, _ in sink.body) == b"all of it" and sink.end == [None] and not conn.reusable


@pytest.mark.parametrize("garbage", [b"SMTP ready\r\n\r\n", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"])
def test_what_is_not_http_ends_the_request_with_the_reason(garbage: bytes) -> None:
    conn, sink = _conn()
    conn.data_received(garbage)
    (err,) = sink.end
    assert isinstance(err, HttpError) and "malformed HTTP response" in str(err) and conn.closed


def test_a_connection_lost_mid_body_ends_the_request_with_an_error() -> None:
    conn, sink = _conn()
    conn.data_received(CHUNKED[:150])
    conn.connection_lost(ConnectionResetError("reset"))
    (err,) = sink.end
    assert isinstance(err, ConnectionResetError) and not conn.reusable


async def _server(handler: Any) -> tuple[asyncio.Server, int]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


STREAM_BODY = (b'data: {"choices":[{"delta":{"content":" x"}}]}\n\n'
               b'data: {"choices":[{"delta":{},"finish_reason":"length"}],"usage":{"completion_tokens":1}}\n\n'
               b"data: [DONE]\n\n")
RESPONSE = (f"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {len(STREAM_BODY)}\r\n\r\n"
            .encode() + STREAM_BODY)


def test_connections_are_reused_and_a_closed_kept_alive_one_is_replaced() -> None:
    """The server answers the first request of each connection, then closes the connection when the
    next request arrives on it (a keep-alive time-out racing the request): the client must retry on
    a new connection, and record a normal stream."""
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        served = 0
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            n = int(next(x for x in head.split(b"\r\n") if x.lower().startswith(b"content-length")).split(b":")[1])
            await reader.readexactly(n)
            if served:
                break  # close without an answer
            writer.write(RESPONSE)
            await writer.drain()
            served += 1
        writer.close()

    async def go() -> list[Any]:
        server, port = await _server(handler)
        async with server, VllmClient(f"http://127.0.0.1:{port}", "m") as client:
            out = []
            for i in range(3):
                out.append(await client.stream_chat({"model": "m", "stream": True}, request_id=f"r{i}",
                                                    budget=RequestBudget(5.0, 10.0)))
            return out

    records = asyncio.run(go())
    assert [(r.ok, r.completion_tokens, r.error) for r in records] == [(True, 1, "")] * 3
    assert connections == 3  # one each: the second and third found theirs closed and opened another


def test_a_pool_keeps_a_connection_for_the_next_request() -> None:
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            n = int(next(x for x in head.split(b"\r\n") if x.lower().startswith(b"content-length")).split(b":")[1])
            await reader.readexactly(n)
            writer.write(RESPONSE)
            await writer.drain()
        writer.close()

    async def go() -> int:
        server, port = await _server(handler)
        async with server:
            pool = ConnectionPool("127.0.0.1", port, ssl_context=None, connect_timeout_s=5)
            await pool.preopen(2)
            for _ in range(4):
                conn, reused = await pool.acquire()
                assert reused
                sink = Ending(asyncio.get_running_loop().create_future())
                conn.start(b"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", sink)
                assert await sink.done is None
                pool.release(conn)
            await pool.aclose()
            return connections

    assert asyncio.run(go()) == 2
