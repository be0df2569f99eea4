"""gRPC straight from a socket, for load on Triton (``trtkit bench --server ... --grpc --client wire``).

tritonclient's clients spend CPU on every request (building it, grpc's asyncio machinery, wrapping the answer;
docs/performance.md, Serving, has the measurements): at tens of thousands of requests a second the client, not the
server, sets the pace. A load generator sends the same request again and again, so here it is encoded once -- its
HTTP/2 header block and its gRPC message -- and every request is two frames written to a socket under a new stream
id. One thread drives a few connections with a selector, a closed loop: each answer sends the next request on its
connection.

What it speaks of HTTP/2 (RFC 9113) and HPACK (RFC 7541): the client preface and SETTINGS, with a header table of 0
bytes, so that the server's header blocks depend on no state: each distinct block is decoded once (with ``hpack``) and
known by its bytes after; flow control both ways; PING answered; CONTINUATION, padding, RST_STREAM and GOAWAY. Not:
TLS, server push (turned off in the SETTINGS), priorities.

A request counts as answered when its stream ends with ``grpc-status: 0`` after a response message in which every
output the model lists carries its data; anything else is a failed request with the server's reason.
"""

from __future__ import annotations

import itertools
import selectors
import socket
import struct
import time
from collections import deque
from dataclasses import dataclass, field
from urllib.parse import unquote

from trtkit.errors import DependencyError, ServeError

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 5, 6, 7, 8, 9
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY = 0x4, 0x8, 0x20
MAX_WINDOW = (1 << 31) - 1
DEFAULT_WINDOW, DEFAULT_FRAME = 65_535, 16_384
FRAME = 1 << 20  # the largest frame the client takes: a large answer in few frames (HTTP/2's default: 16 KiB)
# SETTINGS ids: header table size, push, concurrent streams, initial window, frame size
TABLE_SIZE, ENABLE_PUSH, MAX_STREAMS, INITIAL_WINDOW, MAX_FRAME = 1, 2, 3, 4, 5
_HEAD = struct.Struct(">BHBBI")  # a frame's 9-byte header: length (8 + 16 bits), type, flags, stream id
_U32 = struct.Struct(">I")
_DTYPE_BYTES = {"BOOL": 1, "UINT8": 1, "INT8": 1, "UINT16": 2, "INT16": 2, "FP16": 2, "BF16": 2, "UINT32": 4,
                "INT32": 4, "FP32": 4, "UINT64": 8, "INT64": 8, "FP64": 8}  # fmt: skip
INFER_PATH = "/inference.GRPCInferenceService/ModelInfer"
_IOV_MAX = 512  # pieces a sendmsg takes at once (Linux: 1024)
_KNOWN_BLOCKS = 256  # distinct header blocks of the server's remembered, decoded, per connection


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One HTTP/2 frame."""
    return _HEAD.pack(len(payload) >> 16, len(payload) & 0xFFFF, kind, flags, stream) + payload


def hpack_int(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """An HPACK integer with a ``prefix_bits`` prefix, the prefix's other bits ``first`` (RFC 7541, 5.1)."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def _literal(name: str | int, value: str) -> bytes:
    """A header field as a literal without indexing (RFC 7541, 6.2.2: the server adds nothing to its table), by
    static-table index or by name, its strings without Huffman coding."""
    head = hpack_int(name, 4) if isinstance(name, int) else b"\x00" + hpack_int(len(name), 7) + name.encode()
    return head + hpack_int(len(value.encode()), 7) + value.encode()


def request_headers(authority: str, path: str = INFER_PATH, timeout_s: float | None = None) -> bytes:
    """The header block of every request: POST ``path`` over http to ``authority`` as gRPC (static-table entries 3
    ``:method POST``, 6 ``:scheme http``; names 4 ``:path``, 1 ``:authority``, 31 ``content-type``)."""
    block = b"\x83\x86" + _literal(4, path) + _literal(1, authority) + _literal(31, "application/grpc")
    block += _literal("te", "trailers") + _literal("user-agent", "trtkit-wire")
    if timeout_s:  # the server gives up on the request too (gRPC's own deadline; at most 8 digits)
        block += _literal("grpc-timeout", f"{max(1, min(int(timeout_s * 1000), 99_999_999))}m")
    return block


def grpc_message(message: bytes) -> bytes:
    """``message`` as a gRPC length-prefixed message (uncompressed)."""
    return b"\x00" + _U32.pack(len(message)) + message


@dataclass
class Finished:
    """A stream that ended: when it started, whether the server's headers and trailers said it went well (``error``
    None), and the response message's bytes."""

    stream: int
    started: float
    error: str | None
    body: bytes | bytearray = b""


@dataclass
class _Stream:
    started: float
    window: int  # how much more DATA the server takes on this stream
    sent: int = 0  # bytes of the request message sent
    body: bytearray = field(default_factory=bytearray)
    error: str | None = None
    status_seen: bool = False  # trailers with grpc-status came


class Connection:
    """One HTTP/2 connection sending one request over and over (``header_block``, ``message``: already encoded), a
    stream each. :meth:`start` begins a request; :meth:`receive` reads what the socket has and returns the streams
    that ended; :meth:`flush` writes what is waiting. Non-blocking: a selector says when to call them."""

    def __init__(self, host: str, port: int, header_block: bytes, message: bytes, connect_timeout_s: float = 10.0):
        self.block, self.message = header_block, memoryview(grpc_message(message))
        self.sock = socket.create_connection((host, port), timeout=connect_timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        settings = b"".join(
            struct.pack(">HI", key, value)
            for key, value in ((TABLE_SIZE, 0), (ENABLE_PUSH, 0), (INITIAL_WINDOW, MAX_WINDOW), (MAX_FRAME, FRAME))
        )
        # what waits to be written, in order: frames, and a request's bytes as views of the one encoded message (no
        # copy of a large request in Python; the socket gathers the pieces)
        self.out: deque = deque([PREFACE, frame(SETTINGS, 0, 0, settings)])
        self.out.append(frame(WINDOW_UPDATE, 0, 0, _U32.pack(MAX_WINDOW - DEFAULT_WINDOW)))
        self.inbox: list = []  # what was read and not handled yet: the start of a frame
        self.have, self.need = 0, 9  # its bytes, and how many it takes to handle the next frame
        self.next_stream = 1
        self.streams: dict = {}
        self.blocked: deque = deque()  # streams with request bytes the flow-control windows hold back
        self.queued: deque = deque()  # start times of requests over the server's limit of concurrent streams
        self.send_window, self.stream_window, self.max_frame = DEFAULT_WINDOW, DEFAULT_WINDOW, DEFAULT_FRAME
        self.max_streams: int | None = None
        self.received = 0  # DATA bytes since this connection's window was last topped up
        self.fragment: list | None = None  # [stream, block so far, end_stream] of a header block in CONTINUATIONs
        self.blocks: dict = {}  # a header block's bytes -> (error or None, has grpc-status)
        self.dead: str | None = None  # why the connection is unusable
        self.going_away = False

    # --- sending ---

    def start(self, now: float) -> None:
        """Begin a request (waiting for a free stream where the server allows no more at once)."""
        if self.max_streams is not None and len(self.streams) >= self.max_streams:
            self.queued.append(now)
            return
        sid = self.next_stream
        self.next_stream += 2
        if self.next_stream > MAX_WINDOW:  # stream ids are spent (2**30 requests): no new stream after this one
            self.going_away = True
        stream = self.streams[sid] = _Stream(now, self.stream_window)
        self.out.append(frame(HEADERS, END_HEADERS, sid, self.block))
        self._send_data(sid, stream)

    def _send_data(self, sid: int, stream: _Stream) -> None:
        message = self.message
        while stream.sent < len(message):
            size = min(len(message) - stream.sent, stream.window, self.send_window, self.max_frame)
            if size <= 0:
                self.blocked.append(sid)
                return
            end = stream.sent + size
            self.out.append(_HEAD.pack(size >> 16, size & 0xFFFF, DATA, END_STREAM if end == len(message) else 0, sid))
            self.out.append(message[stream.sent : end])
            stream.sent, stream.window, self.send_window = end, stream.window - size, self.send_window - size

    def _unblock(self) -> None:
        for _ in range(len(self.blocked)):
            sid = self.blocked.popleft()
            if sid in self.streams:
                self._send_data(sid, self.streams[sid])

    def flush(self) -> bool:
        """Write what the socket takes now; True when something is still waiting."""
        out = self.out
        while out and self.dead is None:
            chunks = list(itertools.islice(out, _IOV_MAX))
            try:
                sent = self.sock.sendmsg(chunks)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                self._die(f"the connection broke while sending ({exc})")
                return False
            whole = sent == sum(len(c) for c in chunks)
            while sent:
                first = out[0]
                if len(first) <= sent:
                    sent -= len(first)
                    out.popleft()
                else:
                    out[0] = memoryview(first)[sent:]
                    sent = 0
            if not whole:  # the socket's buffer is full
                break
        return bool(out) and self.dead is None

    def cancel(self, sid: int) -> None:
        """Give up on a stream (RST_STREAM CANCEL); its answer, if one comes, is dropped."""
        if self.streams.pop(sid, None) is not None:
            self.out.append(frame(RST_STREAM, 0, sid, _U32.pack(0x8)))

    # --- receiving ---

    def receive(self, now: float) -> list:
        """Read what has come and handle its frames; the streams that ended (:class:`Finished`), in the order they
        did. A closed or broken connection ends every stream it had, each with the reason."""
        try:
            chunk = self.sock.recv(1 << 20)
        except (BlockingIOError, InterruptedError):
            return []
        except OSError as exc:
            return self._die(f"the connection broke ({exc})")
        if not chunk:
            return self._die("the server closed the connection")
        self.inbox.append(chunk)
        self.have += len(chunk)
        if self.have < self.need:  # the rest of a frame is still on its way: joined once it is all here
            return []
        data = b"".join(self.inbox) if len(self.inbox) > 1 else chunk
        view = memoryview(data)  # frames' payloads as views: a large answer's bytes are copied once, into its body
        done: list = []
        pos, size = 0, len(data)
        try:
            while size - pos >= 9:
                hi, lo, kind, flags, sid = _HEAD.unpack_from(data, pos)
                length = hi << 16 | lo
                if size - pos - 9 < length:
                    break
                self._frame(kind, flags, sid & MAX_WINDOW, view[pos + 9 : pos + 9 + length], done)
                pos += 9 + length
        except ServeError as exc:
            return done + self._die(str(exc))
        rest = data[pos:]
        self.inbox, self.have = ([rest] if rest else []), len(rest)
        self.need = 9 + (rest[0] << 16 | rest[1] << 8 | rest[2]) if len(rest) >= 9 else 9
        if self.received > MAX_WINDOW // 2:  # top the connection's window up again
            self.out.append(frame(WINDOW_UPDATE, 0, 0, _U32.pack(self.received)))
            self.received = 0
        while self.queued and (self.max_streams is None or len(self.streams) < self.max_streams):
            self.start(self.queued.popleft())
        return done

    def _frame(self, kind: int, flags: int, sid: int, view: memoryview, done: list) -> None:
        if self.fragment is not None and kind != CONTINUATION:
            raise ServeError("the server broke off a header block (RFC 9113, 6.10)")
        if kind == DATA:
            self.received += len(view)
            stream = self.streams.get(sid)
            if stream is not None:
                stream.body += _unpad(view, flags)
                if flags & END_STREAM:
                    self._end(sid, done)
            return
        payload = bytes(view)  # control frames and header blocks: a few bytes
        if kind in (HEADERS, CONTINUATION):
            self._header_frame(kind, flags, sid, payload, done)
        elif kind == RST_STREAM:
            stream = self.streams.get(sid)
            if stream is not None:
                code = _U32.unpack_from(payload)[0] if len(payload) >= 4 else -1
                stream.error = stream.error or f"the server reset the stream (HTTP/2 error code {code})"
                self._end(sid, done)
        elif kind == SETTINGS and not flags & ACK:
            self._settings(payload)
            self.out.append(frame(SETTINGS, ACK, 0))
        elif kind == PING and not flags & ACK:
            self.out.append(frame(PING, ACK, 0, payload))
        elif kind == WINDOW_UPDATE:
            grow = _U32.unpack_from(payload)[0] & MAX_WINDOW
            if sid == 0:
                self.send_window += grow
            elif sid in self.streams:
                self.streams[sid].window += grow
            self._unblock()
        elif kind == GOAWAY:
            last, code = struct.unpack_from(">II", payload)
            last &= MAX_WINDOW
            self.going_away = True
            why = f"the server is going away (HTTP/2 GOAWAY, error code {code}{_debug(payload[8:])})"
            for gone in [s for s in self.streams if s > last]:
                self.streams[gone].error = why
                self._end(gone, done)
            if not self.streams:
                raise ServeError(why)
        elif kind == PUSH_PROMISE:
            raise ServeError("the server pushed a stream though push is off in the client's SETTINGS")

    def _header_frame(self, kind: int, flags: int, sid: int, payload: bytes, done: list) -> None:
        if kind == HEADERS:
            if flags & PADDED:
                payload = _unpad(payload, flags)
            if flags & PRIORITY:
                payload = payload[5:]
            self.fragment = [sid, payload, flags & END_STREAM]
        elif self.fragment is None or self.fragment[0] != sid:
            raise ServeError("the server sent a CONTINUATION frame out of place (RFC 9113, 6.10)")
        else:
            self.fragment[1] += payload
        if not flags & END_HEADERS:
            return
        sid, block, end = self.fragment
        self.fragment = None
        stream = self.streams.get(sid)
        if stream is None:
            return  # a stream given up on
        known = self.blocks.get(block)
        if known is None:
            known = read_header_block(block)
            if len(self.blocks) < _KNOWN_BLOCKS:  # errors' messages may differ each time: the cache stays small
                self.blocks[block] = known
        error, has_status = known
        stream.error = stream.error or error
        stream.status_seen = stream.status_seen or has_status
        if end:
            self._end(sid, done)

    def _settings(self, payload: bytes) -> None:
        for at in range(0, len(payload) - len(payload) % 6, 6):
            key, value = struct.unpack_from(">HI", payload, at)
            if key == INITIAL_WINDOW:
                for stream in self.streams.values():
                    stream.window += value - self.stream_window
                self.stream_window = value
            elif key == MAX_FRAME:
                self.max_frame = value
            elif key == MAX_STREAMS:
                self.max_streams = value
        self._unblock()

    def _end(self, sid: int, done: list) -> None:
        stream = self.streams.pop(sid)
        error = stream.error
        if error is None and not stream.status_seen:
            error = "the stream ended without a grpc-status"
        done.append(Finished(sid, stream.started, error, stream.body))

    def _die(self, why: str) -> list:
        """Mark the connection dead; every stream it had (and every request waiting for one) ends with ``why``."""
        if self.dead is None:
            self.dead = why
            try:
                self.sock.close()
            except OSError:
                pass
        done = [Finished(sid, s.started, why) for sid, s in self.streams.items()]
        done += [Finished(0, started, why) for started in self.queued]
        self.streams.clear()
        self.queued.clear()
        return done

    def close(self) -> None:
        if self.dead is None:
            try:
                self.sock.sendall(b"".join(self.out) + frame(GOAWAY, 0, 0, struct.pack(">II", 0, 0)))
            except OSError:
                pass
            self._die("closed by the client")


def _unpad(payload, flags: int):
    if not flags & PADDED:
        return payload
    if not payload or payload[0] >= len(payload):
        raise ServeError("the server sent a frame with more padding than payload (RFC 9113, 6.1)")
    return payload[1 : len(payload) - payload[0]]


def _debug(data: bytes) -> str:
    text = data.decode(errors="replace").strip()
    return f": {text}" if text else ""


def read_header_block(block: bytes) -> tuple:
    """``(error or None, whether it carries grpc-status)`` of one header block of the server's (response headers,
    trailers, or both in one), decoded on its own: the client's SETTINGS leave the server no header table.

    Raises:
        DependencyError: the ``hpack`` package is missing.
        ServeError: the block does not decode on its own (the server kept a header table all the same).
    """
    decoder = _hpack().Decoder()
    decoder.header_table_size = 0
    try:
        headers = dict(decoder.decode(block, raw=False))
    except Exception as exc:  # hpack's HPACKError and its kin
        raise ServeError(
            f"The server's header block does not decode on its own ({type(exc).__name__}: {exc}); it may keep a "
            "header table though the client asked for none: load it with client='tritonclient'"
        ) from exc
    status = headers.get(":status")
    if status is not None and status != "200":
        return f"the server answered HTTP {status}", "grpc-status" in headers
    code = headers.get("grpc-status")
    if code is not None and code != "0":
        message = headers.get("grpc-message", "")
        return f"gRPC status {code}: {unquote(message)}", True  # grpc-message is percent-encoded
    return None, code is not None


def _hpack():
    try:
        import hpack
    except ImportError as exc:
        raise DependencyError(
            f"The wire client reads the server's headers with hpack ({exc}); install it with "
            'pip install "trtkit[serve]"'
        ) from exc
    return hpack


# --- a level of load -------------------------------------------------------------------------------------------------


@dataclass
class Outputs:
    """What every answer must carry: each output the model lists, with all its bytes."""

    names: tuple

    checked: list = field(default_factory=list)  # answers already found whole (the same input: the same answer)

    def check(self, body) -> None:
        """Raises ServeError: ``body`` (the response's gRPC message) is not an answer with every output's data."""
        if any(body == seen for seen in self.checked):  # lengths first, then memcmp: no hash of a large answer
            return
        from tritonclient.grpc import service_pb2

        if len(body) < 5 or body[0] != 0:
            raise ServeError("The answer is not one uncompressed gRPC message")
        answer = service_pb2.ModelInferResponse.FromString(bytes(body[5 : 5 + _U32.unpack_from(body, 1)[0]]))
        raw = answer.raw_output_contents
        got = {out.name: (out, raw[i] if i < len(raw) else None) for i, out in enumerate(answer.outputs)}
        for name in self.names:
            if name not in got:
                raise ServeError(f"The answer has no output '{name}'")
            out, data = got[name]
            need = _DTYPE_BYTES.get(out.datatype, 1) * _count(out.shape)  # BYTES: at least a byte an element
            if data is None or len(data) < need:
                raise ServeError(
                    f"Output '{name}' came back without its data ({0 if data is None else len(data)} of {need} bytes)"
                )
        if len(self.checked) < 4:
            self.checked.append(bytes(body))


def _count(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


class WireClient:
    """``connections`` HTTP/2 connections to ``host:port`` sending the same encoded ``request`` (a serialized
    ``ModelInferRequest``). :meth:`level` runs one closed-loop level of load over them."""

    def __init__(self, address: str, request: bytes, outputs: Outputs, *, connections: int = 1, timeout_s=30.0):
        _hpack()  # missing: said now, not at the first answer
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ServeError(f"The wire client needs HOST:PORT, not {address!r}")
        self.outputs, self.timeout_s = outputs, float(timeout_s)
        block = request_headers(address, timeout_s=timeout_s)
        self.connections: list = []
        try:
            for _ in range(max(1, int(connections))):
                self.connections.append(Connection(host.strip("[]"), int(port), block, request))
        except OSError as exc:
            self.close()
            raise ServeError(f"No gRPC server answers at {address}: {exc}") from exc

    def level(self, concurrency: int, duration_s: float, cap: int) -> tuple:
        """``concurrency`` requests in flight, each answer sending the next on its connection, until ``duration_s``
        has passed or ``cap`` requests were sent; then every one in flight is waited for (or timed out). Returns
        ``(latencies in ms of the answered, errors of the failed, wall seconds, CPU seconds)``."""
        live = [c for c in self.connections if c.dead is None]
        if not live:
            raise ServeError(f"Every connection of the wire client is closed ({self.connections[0].dead})")
        latencies: list = []
        errors: list = []
        check, timeout_s = self.outputs.check, self.timeout_s
        selector = selectors.DefaultSelector()
        start, cpu = time.perf_counter(), time.process_time()
        deadline, budget = start + duration_s, int(cap)
        for i in range(min(concurrency, budget)):
            target = live[i % len(live)]
            target = target if not target.going_away else _any_live(live)
            if target is None:
                break
            target.start(start)
            budget -= 1
        for conn in live:
            waiting = conn.flush()
            if conn.dead is None:
                selector.register(conn.sock, selectors.EVENT_READ | selectors.EVENT_WRITE * waiting, conn)
        next_sweep = start + 0.1
        try:
            while any(c.streams or c.queued for c in live):
                events = selector.select(0.1)
                now = time.perf_counter()
                for key, mask in events:
                    conn = key.data
                    if not mask & selectors.EVENT_READ:
                        continue
                    for done in conn.receive(now):
                        if done.error is None:
                            try:
                                check(done.body)
                            except ServeError as exc:
                                done.error = str(exc)
                        if done.error is None:
                            latencies.append((now - done.started) * 1e3)
                        else:
                            errors.append(f"ServeError: {done.error}")
                        if budget > 0 and now < deadline:
                            target = conn if conn.dead is None and not conn.going_away else _any_live(live)
                            if target is not None:
                                budget -= 1
                                target.start(now)
                if now >= next_sweep:  # requests past their time: given up on, and each one counted failed
                    next_sweep = now + 0.1
                    for conn in live:
                        for sid in [s for s, st in conn.streams.items() if now - st.started > timeout_s]:
                            conn.cancel(sid)
                            errors.append(f"ServeError: no answer within {timeout_s:g} s")
                            if budget > 0 and now < deadline and conn.dead is None and not conn.going_away:
                                budget -= 1
                                conn.start(now)
                for conn in live:
                    if conn.dead is None:
                        mask = selectors.EVENT_READ | selectors.EVENT_WRITE * conn.flush()
                        if selector.get_key(conn.sock).events != mask:
                            selector.modify(conn.sock, mask, conn)
                for conn in [c for c in live if c.dead is not None]:  # once: a dead one is out of the loop
                    selector.unregister(conn.sock)  # (closed: the selector finds it by the object)
                    live.remove(conn)
        finally:
            selector.close()
        return latencies, errors, time.perf_counter() - start, time.process_time() - cpu

    def close(self) -> None:
        for conn in self.connections:
            conn.close()


def _any_live(conns: list):
    return next((c for c in conns if c.dead is None and not c.going_away), None)
