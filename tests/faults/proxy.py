"""A TCP proxy between portqueue and PostgreSQL that can break one connection
at a time, the way networks do (issue 7, scenarios 3 and 4).

Every connection through the proxy is a ``Link``, named by the
``application_name`` its client sent in the startup packet (portqueue names
each connection ``portqueue:<role>``: worker, heartbeat, listener, handler,
client; see ``Settings.connection_kwargs``). Per role, the test can:

- ``cut(role)``: close both sockets (the client sees the connection drop);
- ``blackhole(role)``: stop forwarding in both directions but keep both
  sockets open, so neither side ever sees a FIN or RST: the client's writes
  succeed and its reads wait forever, as behind a dead NAT or firewall;
- ``cut_after_commit(role)``: the next ``COMMIT`` that role sends reaches the
  server, the server's reply is swallowed, then the link is cut: a commit
  that happened, whose client cannot know it did;
- ``cut_after_statement(role, fragment)``: the same for the next statement
  whose SQL contains ``fragment`` (an autocommit statement commits as it runs);
- ``cut_before_commit(role)``: the next ``COMMIT`` never reaches the server
  (the link is cut instead): the client sees the very same error as above,
  but nothing committed.

The proxy speaks just enough of the protocol to do this: it answers SSL and
GSS encryption requests with "no" (so it sees plain messages), reads the
startup packet, and frames the client's messages (type byte, length) to spot
a statement: a simple query (``Q``), or a parse (``P``) whose request ends at
the next ``Sync`` (``S``). Everything else is forwarded byte for byte.
Threads, not asyncio: the worker under test may run its own loops in this
process, and a proxy that shares none of them cannot be starved by them.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from psycopg.conninfo import conninfo_to_dict, make_conninfo

SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102
REPLY_WAIT_SECONDS = 5.0


@dataclass(frozen=True)
class Upstream:
    """Where the server listens: a TCP address, or a Unix socket path."""

    host: str
    port: int

    @classmethod
    def from_dsn(cls, dsn: str) -> Upstream:
        params = conninfo_to_dict(dsn)
        return cls(str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432))

    def connect(self) -> socket.socket:
        if self.host.startswith("/"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(f"{self.host}/.s.PGSQL.{self.port}")
            return sock
        return socket.create_connection((self.host, self.port))


def _read_exact(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError("peer closed")
        chunks += chunk
    return bytes(chunks)


Trap = Callable[[bytes], bool]


def _is_commit(message: bytes) -> bool:
    """A simple-protocol query (type ``Q``) whose text is ``COMMIT``."""
    return message[:1] == b"Q" and message[5:].rstrip(b"\0").strip().upper() == b"COMMIT"


def _statement_with(fragment: bytes) -> Trap:
    return lambda message: message[:1] in (b"Q", b"P") and fragment in message


@dataclass(eq=False)
class Link:
    """One client connection and its server connection."""

    client: socket.socket
    application_name: str = ""
    server: socket.socket | None = None
    forwarding: bool = True
    swallow_replies: bool = False
    trapped: bool = False
    closed: bool = False
    commit_sent: threading.Event = field(default_factory=threading.Event)
    server_replied: threading.Event = field(default_factory=threading.Event)

    @property
    def role(self) -> str:
        return self.application_name.rsplit(":", 1)[-1]

    def close(self) -> None:
        self.closed = True
        for sock in (self.client, self.server):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()


class Proxy:
    """Listens on 127.0.0.1 (an ephemeral port) and forwards to ``upstream``."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        self.links: list[Link] = []
        self.commits_trapped = 0
        self._traps: dict[str, list[Trap]] = {}
        self._drops: dict[str, int] = {}
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False
        self._thread = threading.Thread(target=self._accept_loop, name="faults-proxy",
                                        daemon=True)
        self._thread.start()

    def dsn(self, server_dsn: str) -> str:
        """``server_dsn`` (same database, user, options) through this proxy."""
        params = conninfo_to_dict(server_dsn)
        params.update(host="127.0.0.1", port=str(self.port), sslmode="disable",
                      gssencmode="disable")
        return make_conninfo("", **params)

    # --- faults ---

    def open_links(self, role: str) -> list[Link]:
        with self._lock:
            return [link for link in self.links if link.role == role and not link.closed]

    def cut(self, role: str) -> int:
        """Close every open link of ``role``; how many there were."""
        links = self.open_links(role)
        for link in links:
            link.close()
        return len(links)

    def blackhole(self, role: str) -> int:
        """Stop forwarding on every open link of ``role``, sockets left open."""
        links = self.open_links(role)
        for link in links:
            link.forwarding = False
        return len(links)

    def cut_after_commit(self, role: str) -> None:
        """Arm: the next COMMIT a ``role`` link sends is forwarded, its reply
        swallowed, its link cut."""
        with self._lock:
            self._traps.setdefault(role, []).append(_is_commit)

    def cut_before_commit(self, role: str) -> None:
        """Arm: the next COMMIT a ``role`` link sends is not forwarded; the
        link is cut."""
        with self._lock:
            self._drops[role] = self._drops.get(role, 0) + 1

    def cut_after_statement(self, role: str, fragment: str) -> None:
        """Arm: the next statement of a ``role`` link whose SQL contains
        ``fragment`` is forwarded, its reply swallowed, its link cut."""
        with self._lock:
            self._traps.setdefault(role, []).append(_statement_with(fragment.encode()))

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            links = list(self.links)
        for link in links:
            link.close()

    # --- forwarding ---

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            link = Link(client)
            with self._lock:
                self.links.append(link)
            self._thread_for(lambda link=link: self._client_to_server(link), "c2s")  # type: ignore[misc]

    @staticmethod
    def _thread_for(target: Callable[[], None], name: str) -> None:
        threading.Thread(target=target, name=f"faults-proxy-{name}", daemon=True).start()

    def _client_to_server(self, link: Link) -> None:
        try:
            startup = self._read_startup(link)
            link.server = self.upstream.connect()
            link.server.sendall(startup)
            self._thread_for(lambda: self._server_to_client(link), "s2c")
            if struct.unpack("!i", startup[4:8])[0] == CANCEL_REQUEST:
                return  # the server answers a cancel request by closing
            while not link.closed:
                head = _read_exact(link.client, 5)
                (length,) = struct.unpack("!i", head[1:5])
                message = head + _read_exact(link.client, length - 4)
                if not link.forwarding:
                    continue
                if _is_commit(message) and self._take_drop(link.role):
                    link.close()
                    return
                link.trapped = link.trapped or self._take_trap(link.role, message)
                if link.trapped and message[:1] in (b"Q", b"S"):  # the request is complete
                    self._send_then_cut(link, message)
                    return
                link.server.sendall(message)
        except OSError:
            pass
        # Black-holed: both sockets stay open until the test ends.
        if link.forwarding:
            link.close()

    def _read_startup(self, link: Link) -> bytes:
        """The startup (or cancel) packet, after refusing encryption requests."""
        while True:
            (length,) = struct.unpack("!i", _read_exact(link.client, 4))
            body = _read_exact(link.client, length - 4)
            code = struct.unpack("!i", body[:4])[0]
            if code in (SSL_REQUEST, GSSENC_REQUEST):
                link.client.sendall(b"N")
                continue
            if code != CANCEL_REQUEST:
                fields = body[4:].split(b"\0")
                params = dict(zip(fields[0::2], fields[1::2], strict=False))
                link.application_name = params.get(b"application_name", b"").decode()
            return struct.pack("!i", length) + body

    def _take_trap(self, role: str, message: bytes) -> bool:
        with self._lock:
            traps = self._traps.get(role, [])
            for trap in traps:
                if trap(message):
                    traps.remove(trap)
                    self.commits_trapped += 1
                    return True
            return False

    def _take_drop(self, role: str) -> bool:
        with self._lock:
            if self._drops.get(role, 0) <= 0:
                return False
            self._drops[role] -= 1
            self.commits_trapped += 1
            return True

    def _send_then_cut(self, link: Link, message: bytes) -> None:
        assert link.server is not None
        link.swallow_replies = True
        link.server.sendall(message)
        link.commit_sent.set()
        # The server's reply proves the request was processed; then the client
        # loses the connection without ever reading it.
        link.server_replied.wait(REPLY_WAIT_SECONDS)
        link.close()

    def _server_to_client(self, link: Link) -> None:
        assert link.server is not None
        try:
            while not link.closed:
                data = link.server.recv(65536)
                if not data:
                    break
                if link.swallow_replies:
                    link.server_replied.set()
                    continue
                if link.forwarding:
                    link.client.sendall(data)
        except OSError:
            pass
        finally:
            if link.forwarding:
                link.close()
