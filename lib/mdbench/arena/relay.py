"""Relay of a sandbox's loopback ports to allow-listed endpoints the evaluator reaches (Harbor ``allowlist``).

A confined command of a Harbor trial whose network policy is ``allowlist`` runs in its own network namespace
with only a loopback interface (:class:`mdbench.sandbox.Confinement` with ``network=False``). For each
allow-listed loopback endpoint ``127.0.0.1:PORT`` the sandbox opens a listening socket on ``127.0.0.1:PORT``
*inside* that namespace (``loopback_listen`` → ``ConfinedProcess.listeners``); :class:`LoopbackRelay` accepts
on it from the host side and pipes every connection, byte for byte, to the endpoint as the evaluator reaches it
(a model endpoint or metering proxy on the host's loopback). Nothing else is reachable from inside: other ports
and hosts have no route. A failed connection to the endpoint closes the agent's connection; nothing here raises
into the caller.
"""

from __future__ import annotations

import logging
import socket
import threading
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

#: Connections relayed at once per relay (more wait in the listen backlog).
MAX_CONNECTIONS = 64
#: Seconds to connect to the endpoint.
CONNECT_TIMEOUT_S = 10.0
_CHUNK = 64 * 1024


@dataclass
class LoopbackRelay:
    """Serve ``listeners`` (port → listening socket inside the sandbox) by relaying to ``targets`` (port → host, port).

    Call :meth:`start` once the sandbox handed its sockets over and :meth:`close` when the command ended.
    ``connections`` counts the relayed connections, ``failed`` those the endpoint refused.
    """

    listeners: dict[int, socket.socket]
    targets: dict[int, tuple[str, int]]
    connections: int = 0
    failed: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _open: set[socket.socket] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _slots: threading.BoundedSemaphore = field(default_factory=lambda: threading.BoundedSemaphore(MAX_CONNECTIONS))

    def start(self) -> LoopbackRelay:
        for port, sock in self.listeners.items():
            target = self.targets.get(port)
            if target is None:       # a listener without a target: close it (connections are refused)
                sock.close()
                continue
            sock.settimeout(0.5)
            t = threading.Thread(target=self._accept, args=(sock, target), daemon=True,
                                 name=f"mdbench-relay-{port}")
            t.start()
            self._threads.append(t)
        return self

    def close(self) -> None:
        """Stop accepting and close every relayed connection."""
        self._stop.set()
        for sock in self.listeners.values():
            try:
                sock.close()
            except OSError:
                pass
        with self._lock:
            open_now = list(self._open)
        for s in open_now:
            _shut(s)
        for t in self._threads:
            t.join(timeout=2)

    def _accept(self, lsock: socket.socket, target: tuple[str, int]) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = lsock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._slots.acquire(timeout=5):
                conn.close()
                continue
            threading.Thread(target=self._relay, args=(conn, target), daemon=True).start()

    def _relay(self, conn: socket.socket, target: tuple[str, int]) -> None:
        up: socket.socket | None = None
        try:
            try:
                up = socket.create_connection(target, timeout=CONNECT_TIMEOUT_S)
            except OSError as exc:
                with self._lock:
                    self.failed += 1
                log.warning("relay to %s:%d failed: %s", target[0], target[1], exc)
                return
            conn.settimeout(None)
            up.settimeout(None)
            with self._lock:
                self.connections += 1
                self._open.update((conn, up))
            back = threading.Thread(target=_pump, args=(up, conn), daemon=True)
            back.start()
            _pump(conn, up)
            back.join()
        finally:
            with self._lock:
                self._open.discard(conn)
                if up is not None:
                    self._open.discard(up)
            for s in (conn, up):
                if s is not None:
                    try:
                        s.close()
                    except OSError:
                        pass
            self._slots.release()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy ``src`` to ``dst`` until EOF or an error; then half-close ``dst``."""
    try:
        while True:
            data = src.recv(_CHUNK)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _shut(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


__all__ = ["LoopbackRelay"]
