"""Triton's own log, quoted in trtkit's errors: what tritonserver said last is most often why it failed."""

from __future__ import annotations

from pathlib import Path


def log_tail(path, lines: int = 8) -> str:
    """``"; the end of Triton's log (<path>): a | b | c"`` for an error message, ``""`` when there is none."""
    try:
        tail = Path(path).read_text(errors="replace").strip().splitlines()[-lines:]
    except OSError:
        return ""
    return f"; the end of Triton's log ({path}): " + " | ".join(line.strip() for line in tail) if tail else ""
