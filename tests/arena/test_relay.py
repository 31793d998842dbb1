"""The allow-list relay of the Harbor host plug-in (:mod:`mdbench.arena.relay`): bytes both ways, one target per
port, a port without a target or a target that is down closes the connection, ``close`` ends everything."""

from __future__ import annotations

import socket
import threading

from mdbench.arena.relay import LoopbackRelay


def _listener() -> tuple[socket.socket, int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    return s, s.getsockname()[1]


def _echo_server() -> tuple[socket.socket, int]:
    srv, port = _listener()

    def serve() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            with c:
                data = b""
                while not data.endswith(b"\n"):
                    chunk = c.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                c.sendall(b"echo:" + data)

    threading.Thread(target=serve, daemon=True).start()
    return srv, port


def _ask(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        c.sendall(payload)
        out = b""
        while True:
            chunk = c.recv(65536)
            if not chunk:
                return out
            out += chunk


def test_relay_passes_bytes_both_ways_and_refuses_what_has_no_target():
    srv, target = _echo_server()
    inside, inside_port = _listener()           # stands for the sandbox's loopback_listen socket
    stray, stray_port = _listener()             # a listener without a target: closed, never relayed
    relay = LoopbackRelay({inside_port: inside, stray_port: stray}, {inside_port: ("127.0.0.1", target)}).start()
    try:
        big = b"x" * 300_000 + b"\n"
        assert _ask(inside_port, big) == b"echo:" + big
        assert _ask(inside_port, b"second\n") == b"echo:second\n"
        assert relay.connections == 2 and relay.failed == 0
        try:
            got = _ask(stray_port, b"hello\n")
        except OSError:
            got = b""
        assert got == b""
    finally:
        relay.close()
        srv.close()
    try:
        _ask(inside_port, b"after close\n")
        reached = True
    except OSError:
        reached = False
    assert not reached


def test_a_target_that_is_down_closes_the_agents_connection_and_is_counted():
    down, down_port = _listener()
    down.close()                                # nothing listens there any more
    inside, inside_port = _listener()
    relay = LoopbackRelay({inside_port: inside}, {inside_port: ("127.0.0.1", down_port)}).start()
    try:
        try:
            got = _ask(inside_port, b"hi\n")
        except ConnectionResetError:
            got = b""
        assert got == b""
        assert relay.failed == 1 and relay.connections == 0
    finally:
        relay.close()
