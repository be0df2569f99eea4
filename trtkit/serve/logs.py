"""What tritonserver left behind, quoted in trtkit's messages: its own log (what it said last is most often why it
failed) and what it printed outside that log (a crash's signal and stack go to its stderr)."""

from __future__ import annotations

from pathlib import Path


def console_path(log_file: Path) -> Path:
    """Where tritonserver's own output goes: beside its log, ``<log>.stderr``."""
    return log_file.with_name(log_file.name + ".stderr")


def _quote(path, lines: int, start: str | None = None) -> list:
    """The last ``lines`` lines of ``path``, or where a line begins with ``start`` the ``lines`` from the last such
    line on; empty where the file is missing or empty."""
    try:
        text = Path(path).read_text(errors="replace").strip().splitlines() if path else []
    except OSError:
        return []
    marks = [i for i, line in enumerate(text) if start and line.startswith(start)]
    return [line.strip() for line in (text[marks[-1] : marks[-1] + lines] if marks else text[-lines:])]


def log_tail(path, lines: int = 8) -> str:
    """``"; the end of Triton's log (<path>): a | b | c"`` for an error message, ``""`` when there is none."""
    tail = _quote(path, lines)
    return f"; the end of Triton's log ({path}): " + " | ".join(tail) if tail else ""


def printed(path, lines: int = 6) -> str:
    """``"; it printed (<path>): a | b"``: what tritonserver printed last, ``""`` when it printed nothing. Where it
    names a signal it caught (``Signal (11) received.``, then its stack, innermost frame first), the quote starts
    there: the frames nearest the crash say where it was."""
    quoted = _quote(path, lines, start="Signal (")
    return f"; it printed ({path}): " + " | ".join(quoted) if quoted else ""
