"""Files trtkit writes: the one rule every writing command and library writer follows.

- Before any work, :func:`check_outputs` refuses an output that is (or is, through links, the same file as) an input
  or another output, that is a folder, or whose folder is missing or not writable. Every output is checked before
  the first is written, so a command fails before a long build rather than after it.
- Each file is written to a temp file in the target folder and renamed over the target (``os.replace``): readers
  never see half a file. :func:`write_files_atomic` stages several files and renames them only when all were staged:
  all or nothing.
- A new file gets the mode a plain ``open(path, "w")`` would give it (``0o666`` less the umask); a replaced file keeps
  its mode.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from trtkit.errors import UsageError, WriteError


def write_bytes_atomic(path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically.

    Raises:
        WriteError: the folder does not exist or is not writable, or ``path`` is a folder (nothing is left behind).
    """
    return write_files_atomic({path: data})[0]


def write_text_atomic(path, text: str) -> Path:
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_files_atomic(files: dict) -> list:
    """Write every ``{path: bytes}`` atomically, all or nothing: each is staged to a temp file first; the targets
    are replaced only once every file is staged. Returns the paths written.

    Raises:
        WriteError: a file cannot be staged (no file is changed then).
    """
    staged: list = []
    try:
        for path, data in files.items():
            staged.append((Path(path), _stage(Path(path), data)))
        for path, tmp in staged:
            os.replace(tmp, path)
    except BaseException as exc:
        for _, tmp in staged:
            _remove_quietly(tmp)
        if isinstance(exc, OSError):
            raise WriteError(f"Cannot write '{path}': {exc.strerror or exc}") from exc
        raise
    return [path for path, _ in staged]


def _stage(path: Path, data: bytes) -> str:
    folder = _folder(path)
    _check_target(path, folder)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise WriteError(f"Cannot write '{path}': {exc.strerror or exc} (is '{folder}' writable?)") from exc
    try:
        os.fchmod(fd, _mode_for(path))
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        _remove_quietly(tmp)
        raise
    return tmp


def _mode_for(path: Path) -> int:
    """The mode of the file being replaced, else what ``open(path, "w")`` would give a new file."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return 0o666 & ~current_umask()


def current_umask() -> int:
    """This process's umask, read without changing it where the system says (Linux), else by setting it back."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def check_writable(path, *, field: str | None = None) -> None:
    """Fail early (before a long build) if ``path`` cannot be written.

    Raises:
        UsageError: ``path`` is empty or a folder. WriteError: its folder is missing or not writable.
    """
    if path is None or str(path) == "":
        raise UsageError("an output path is empty; give a file name", field=field, accepted="a file path")
    path = Path(path)
    _check_target(path, _folder(path), field=field)
    if not os.access(_folder(path), os.W_OK):
        raise WriteError(f"Cannot write '{path}': folder '{_folder(path)}' is not writable", field=field)


def check_outputs(outputs: dict, inputs: dict | None = None) -> None:
    """Check every output before any work: writable, not a folder, and never the same file as an input or as
    another output (paths are compared after following links, and by inode when both exist).

    Args:
        outputs: ``{field: path}`` of the files a call will write (``None`` values are skipped).
        inputs: ``{field: path}`` of the files it reads (``None`` values and non-paths are skipped).

    Raises:
        UsageError: an output is empty, a folder, an input or another output (``field`` names the output).
        WriteError: an output's folder is missing or not writable.
    """
    outs = [(f, p) for f, p in outputs.items() if p is not None]
    ins = [(f, p) for f, p in (inputs or {}).items() if isinstance(p, (str, os.PathLike))]
    for i, (field, path) in enumerate(outs):
        check_writable(path, field=field)
        for other, src in ins:
            if same_file(path, src):
                raise UsageError(
                    f"{field} '{path}' is the same file as {other} '{src}'; writing it would destroy "
                    f"the {other}: give another path",
                    field=field,
                    accepted=f"a path other than {other}",
                )
        for other, dst in outs[:i]:
            if same_file(path, dst):
                raise UsageError(
                    f"{field} '{path}' is the same file as {other} '{dst}'; give each its own path",
                    field=field,
                    accepted=f"a path other than {other}",
                )


def same_file(a, b) -> bool:
    """Whether paths ``a`` and ``b`` name one file: equal after following links, or the same inode."""
    try:
        if os.path.exists(a) and os.path.exists(b):
            return os.path.samefile(a, b)
        return Path(a).resolve() == Path(b).resolve()
    except (OSError, RuntimeError):
        return os.path.abspath(a) == os.path.abspath(b)


def _folder(path: Path) -> Path:
    return path.parent if str(path.parent) else Path(".")


def _check_target(path: Path, folder: Path, *, field: str | None = None) -> None:
    if path.is_dir():
        raise UsageError(
            f"Cannot write '{path}': it is a folder; give a file name inside it", field=field, accepted="a file path"
        )
    if not folder.is_dir():
        raise WriteError(f"Cannot write '{path}': folder '{folder}' does not exist", field=field)


def _remove_quietly(path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
