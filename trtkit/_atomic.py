"""Atomic file writes: a temp file in the target folder, then ``os.replace``. Readers never see half a file."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from trtkit.errors import TrtkitError


def write_bytes_atomic(path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically.

    Raises:
        TrtkitError: the folder does not exist or is not writable (nothing is left behind).
    """
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise TrtkitError(f"Cannot write '{path}': folder '{folder}' does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise TrtkitError(f"Cannot write '{path}': {exc.strerror or exc} (is '{folder}' writable?)") from exc
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        _remove_quietly(tmp)
        if isinstance(exc, OSError):
            raise TrtkitError(f"Cannot write '{path}': {exc.strerror or exc}") from exc
        raise
    return path


def write_text_atomic(path, text: str) -> Path:
    return write_bytes_atomic(path, text.encode("utf-8"))


def check_writable(path) -> None:
    """Fail early (before a long build) if ``path`` cannot be written."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise TrtkitError(f"Cannot write '{path}': folder '{folder}' does not exist")
    if not os.access(folder, os.W_OK):
        raise TrtkitError(f"Cannot write '{path}': folder '{folder}' is not writable")
    if path.is_dir():
        raise TrtkitError(f"Cannot write '{path}': it is a folder; give a file name such as model.engine")


def _remove_quietly(path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
