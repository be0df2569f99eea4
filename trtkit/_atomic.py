"""Files trtkit writes: the one rule every writing command and library writer follows.

- Before any work, :func:`check_outputs` refuses an output that is (or is, through links, the same file as) an input
  or another output, that is a folder, whose name is longer than its filesystem allows, or whose folder is missing
  or not writable. Every output is checked before the first is written, so a command fails before a long build
  rather than after it.
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
    staged: dict = {}
    try:
        for path, data in files.items():
            staged[_stage(Path(path), data)] = Path(path)
    except BaseException as exc:
        for tmp in staged:
            _remove_quietly(tmp)
        if isinstance(exc, OSError):
            raise WriteError(f"Cannot write '{path}': {exc.strerror or exc}") from exc
        raise
    return replace_files(staged)


def replace_files(staged: dict) -> list:
    """Rename each staged ``{temp file: target}`` over its target (in its folder), with the target's mode as
    :func:`write_files_atomic` gives it; for files another library wrote (onnx's external data). Returns the targets.

    Raises:
        WriteError: a rename failed (the temp files not yet renamed are removed).
    """
    pending = dict(staged)
    try:
        for tmp, path in staged.items():
            os.chmod(tmp, _mode_for(Path(path)))
            os.replace(tmp, path)
            del pending[tmp]
    except OSError as exc:
        raise WriteError(f"Cannot write '{path}': {exc.strerror or exc}") from exc
    finally:
        for tmp in pending:
            _remove_quietly(tmp)
    return [Path(path) for path in staged.values()]


def _stage(path: Path, data: bytes) -> str:
    folder = _folder(path)
    _check_target(path, folder)
    try:
        # the temp file's name stays within NAME_MAX whatever the target's length
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:64]}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise WriteError(f"Cannot write '{path}': {exc.strerror or exc} (is '{folder}' writable?)") from exc
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        _remove_quietly(tmp)
        raise
    return tmp  # its mode is set as it is renamed (replace_files)


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
        UsageError: ``path`` is empty, a folder, or has a name longer than its filesystem allows.
        WriteError: its folder is missing or not writable.
    """
    if path is None or str(path) == "":
        raise UsageError("an output path is empty; give a file name", field=field, accepted="a file path")
    path = Path(path)
    check_name_length(path, field=field)
    _check_target(path, _folder(path), field=field)
    if not os.access(_folder(path), os.W_OK):
        raise WriteError(f"Cannot write '{path}': folder '{_folder(path)}' is not writable", field=field)


def check_folder(path, *, field: str | None = None) -> None:
    """Fail early if ``path`` cannot be a folder to write files in: it is a file, its name is too long, or it (or,
    when missing, the nearest folder above it, where it would be created) is not writable.

    Raises:
        UsageError: ``path`` is empty, a file, or its name is too long. WriteError: not writable.
    """
    if path is None or str(path) == "":
        raise UsageError("an output folder is empty; give a folder", field=field, accepted="a folder path")
    path = Path(path)
    check_name_length(path, field=field)
    if path.exists() and not path.is_dir():
        raise UsageError(
            f"'{path}' is a file; give a folder (it is created if missing)", field=field, accepted="a folder path"
        )
    existing = next(p for p in (path, *path.absolute().parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise WriteError(f"Cannot write in '{path}': folder '{existing}' is not writable", field=field)


def check_name_length(path, *, field: str | None = None) -> None:
    """Refuse a name longer than its filesystem takes (NAME_MAX), before anything looks at the path (``ENAMETOOLONG``
    otherwise, from the first ``stat``).

    Raises:
        UsageError: naming the path and the limit.
    """
    limit = _name_max(Path(path))
    for name in Path(path).parts:
        if len(os.fsencode(name)) > limit:
            raise UsageError(
                f"Cannot use '{path}': the name '{name[:40]}...' is {len(os.fsencode(name))} bytes long, over this "
                f"filesystem's limit of {limit} bytes per name; give a shorter name",
                field=field,
                accepted=f"names of at most {limit} bytes",
            )


def _name_max(path: Path) -> int:
    for folder in Path(os.path.abspath(path)).parents:  # the nearest existing folder's filesystem
        try:
            return os.pathconf(folder, "PC_NAME_MAX")
        except (OSError, ValueError):
            continue
    return 255


def check_outputs(outputs: dict, inputs: dict | None = None) -> None:
    """Check every output before any work: writable, not a folder, a name the filesystem takes, and never the same
    file as an input or as another output (paths are compared after following links, and by inode when both exist).

    Args:
        outputs: ``{field: path or list of paths}`` of the files a call will write (``None`` values are skipped).
        inputs: ``{field: path or list of paths}`` of the files it reads, a model's external data files included
            (:func:`trtkit.model.model_files`); ``None`` values and non-paths are skipped.

    Raises:
        UsageError: an output is empty, a folder, too long a name, an input or another output (``field`` names the
            output).
        WriteError: an output's folder is missing or not writable.
    """
    outs = [(f, p) for f, p in _pairs(outputs) if p is not None]
    ins = [(f, p) for f, p in _pairs(inputs or {}) if isinstance(p, (str, os.PathLike))]
    for _, src in ins:  # an input too long to name cannot be compared (nor read): its own check says so
        check_name_length(src)
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


def _pairs(files: dict) -> list:
    """``(field, path)`` for each path of ``{field: path or list of paths}``."""
    return [(f, p) for f, value in files.items() for p in (value if isinstance(value, (list, tuple)) else [value])]


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
