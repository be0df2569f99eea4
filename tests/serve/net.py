"""Loopback ports for the serve tests (CPU and GPU)."""

from __future__ import annotations

import socket


def free_ports(n: int) -> list:
    """``n`` distinct ports on 127.0.0.1 that were free a moment ago."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()
