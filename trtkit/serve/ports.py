"""Ports a server is about to bind: free, or named with the process that holds them (from ``/proc``, where readable)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from trtkit.errors import ServeError, TrtkitError


def check_ports(host: str, ports: dict) -> None:
    """Refuse ports that are taken, naming each with its owner.

    Args:
        host: the address the server binds.
        ports: role -> port, e.g. ``{"HTTP": 8000, "gRPC": 8001, "metrics": 8002}``.

    Raises:
        TrtkitError: a port is out of range, or two roles share one.
        ServeError: a port is in use (the message names the process when it is known).
    """
    seen: dict = {}
    for role, port in ports.items():
        if not 1 <= int(port) <= 65535:
            raise TrtkitError(f"{role} port {port} is outside 1..65535")
        if port in seen:
            raise TrtkitError(f"{role} and {seen[port]} ports are both {port}; give each its own")
        seen[port] = role
    taken = [(role, port) for role, port in ports.items() if not port_is_free(host, port)]
    if taken:
        parts = [f"{role} port {port} on {host} is in use{_owner_text(port)}" for role, port in taken]
        raise ServeError(
            "; ".join(parts) + " (give free ports as http_port, grpc_port, metrics_port)",
            field=f"{taken[0][0]}_port",
            accepted="a free port",
        )


def port_is_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is free for a server
        try:
            s.bind((host, int(port)))
        except OSError:
            return False
    return True


def _owner_text(port: int) -> str:
    owner = port_owner(port)
    if owner is None:
        return ""
    pid, cmd = owner
    return f" by pid {pid} ({cmd})" if cmd else f" by pid {pid}"


def port_owner(port: int, proc: Path = Path("/proc")) -> tuple | None:
    """``(pid, command line)`` of the process listening on TCP ``port``, or ``None`` when it cannot be seen."""
    inodes = _listening_inodes(port, proc)
    if not inodes:
        return None
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            for fd in (pid_dir / "fd").iterdir():
                if os.readlink(fd) in inodes:
                    cmd = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                    return int(pid_dir.name), cmd
        except OSError:
            continue
    return None


def _listening_inodes(port: int, proc: Path) -> set:
    found = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == int(port):
                found.add(f"socket:[{fields[9]}]")
    return found
