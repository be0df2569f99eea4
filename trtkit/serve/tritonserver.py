"""The pytriton wheel's ``tritonserver`` serving a model repository trtkit writes, in a process of its own.

The wheel ships ``tritonserver`` with Triton's Python backend; :func:`prepare_server` copies it into a workspace with
this Python's backend stub (:mod:`trtkit.serve.python_backend`) or with Triton's TensorRT backend beside it
(:mod:`trtkit.serve.tensorrt_backend`), and :class:`TritonProcess` runs it. Triton's endpoints are its own: health,
model ready, metrics and statistics answer as on any Triton; the administrative protocols (shared memory unless
asked for, model repository, trace, logging) are closed behind a token made up per server, as pytriton closes them.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from trtkit.errors import DependencyError, ServeError
from trtkit.serve.logs import console_path, log_tail, printed

INSTALL_HINT = 'pip install "trtkit[serve]"'


def require_pytriton():
    """The ``pytriton`` package, whose wheel carries ``tritonserver``.

    Raises:
        DependencyError: it is not installed (with the command that installs it).
    """
    try:
        import pytriton
        import pytriton.triton  # noqa: F401  (the server part, which needs tritonclient too)
    except ImportError as exc:
        raise DependencyError(f"trtkit serve needs nvidia-pytriton ({exc}); install it with {INSTALL_HINT}") from exc
    return pytriton


# the administrative protocols closed behind the token (shared-memory too unless clients may use it)
RESTRICTED = ("model-repository", "trace", "logging")
TOKEN_HEADER = "trtkit-admin-token"


def prepare_server(workspace: Path, stub: Path | None = None, backends: tuple = ()) -> Path:
    """The pytriton wheel's ``tritonserver`` folder copied into ``workspace``, with ``stub`` (this Python's backend
    stub; None: nothing served runs on the Python backend) in its Python backend, as pytriton prepares it, and each
    folder of ``backends`` (e.g. Triton's ``tensorrt`` backend) copied beside it (copied, not linked: a backend finds
    its own libraries through ``$ORIGIN``); returns the copy's root."""
    from pytriton.utils.distribution import get_root_module_path

    dist = get_root_module_path() / "tritonserver"
    root = Path(workspace) / "tritonserver"
    shutil.copytree(dist, root, ignore=shutil.ignore_patterns("python_backend_stubs", "triton_python_backend_stub"))
    if stub is not None:
        shutil.copy(stub, root / "backends" / "python" / "triton_python_backend_stub")
    for backend in backends:
        shutil.copytree(backend, root / "backends" / Path(backend).name)
    return root


def server_environment(base_env: dict) -> dict:
    """The server process's environment: ``base_env`` (the backend's: its ``LD_LIBRARY_PATH``) over
    this one, the wheel's libraries on ``LD_LIBRARY_PATH``, this interpreter's folder first on ``PATH`` and the folder
    trtkit is imported from on ``PYTHONPATH`` (the stubs import it)."""
    from pytriton.utils.distribution import get_libs_path

    import trtkit

    env = {**os.environ, **base_env}
    env["LD_LIBRARY_PATH"] = ":".join(p for p in (env.get("LD_LIBRARY_PATH", ""), str(get_libs_path())) if p)
    env["PATH"] = ":".join(p for p in (str(Path(sys.executable).parent), env.get("PATH", "")) if p)
    here = str(Path(trtkit.__file__).resolve().parents[1])
    env["PYTHONPATH"] = ":".join(p for p in (here, env.get("PYTHONPATH", "")) if p)
    return env


class TritonProcess:
    """One ``tritonserver`` process serving a model repository: of :mod:`trtkit.serve.python_backend_model` models,
    or of engines on Triton's TensorRT backend (:mod:`trtkit.serve.tensorrt_backend`, with ``backends``).

    Args:
        repo: the model repository (a backend's ``write_repository``).
        settings: the :class:`~trtkit.serve.server.ServeSettings` (ports, host, exit timeout, shared memory).
        workspace: a folder for the server's binaries.
        log_file: where Triton's log goes.
        env: the server process's environment (:func:`server_environment`).
        stub: the Python backend's stub for this Python (:func:`trtkit.serve.python_backend.check_backend_stub`).
        backends: backend folders to serve with besides the wheel's Python backend.
        options: more of tritonserver's options (``{"backend-config": ...}``).
    """

    output_file: Path | None = None  # what tritonserver printed outside its log (set once it is started)

    def __init__(
        self,
        repo: Path,
        settings,
        workspace: Path,
        log_file: Path,
        env: dict,
        *,
        stub: Path | None = None,
        backends: tuple = (),
        options: dict | None = None,
    ):
        self.settings, self.log_file = settings, Path(log_file)
        self._token = secrets.token_hex(16)
        root = prepare_server(workspace, stub, backends)
        s = settings
        restricted = [*RESTRICTED, *(() if s.shared_memory else ("shared-memory",))]
        rule = f"{','.join(restricted)}:{TOKEN_HEADER}={self._token}"
        flags = {  # tritonserver's own options (its command line, not trtkit's)
            "model-repository": repo,
            "backend-directory": root / "backends",
            "cache-directory": root / "caches",
            "http-address": s.host,
            "http-port": int(s.http_port),
            "grpc-address": s.host,
            "grpc-port": int(s.grpc_port),
            "metrics-address": s.host,
            "metrics-port": int(s.metrics_port),
            "exit-timeout-secs": int(s.exit_timeout_s),
            "exit-on-error": "false",  # a model that fails to load is named; the others are served
            "strict-readiness": "false",
            "log-file": self.log_file,
            "grpc-restricted-protocol": rule,
            "http-restricted-api": rule,
            **(options or {}),
            **({"grpc-infer-allocation-pool-size": int(s.grpc_allocation_pool)} if s.grpc_allocation_pool else {}),
        }
        self.command = [str(root / "bin" / "tritonserver"), *(f"--{k}={v}" for k, v in flags.items())]
        # what tritonserver prints itself besides its log: a crash's signal and stack go to its stderr
        self.output_file = console_path(self.log_file)
        with open(self.output_file, "wb") as output:
            self._proc = subprocess.Popen(
                self.command,
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_end_with_parent,
            )

    def is_alive(self) -> bool:
        return self._proc.poll() is None

    def exit_reason(self) -> str | None:
        """Why tritonserver ended (its exit code or signal, and the last lines it printed), None while it runs."""
        return exit_reason(self._proc.poll(), self.output_file)

    def _index(self, timeout_s: float):
        """Triton's model repository index (``POST /v2/repository/index``, behind the token)."""
        s = self.settings
        host = f"[{s.host}]" if ":" in s.host else s.host
        request = urllib.request.Request(
            f"http://{host}:{int(s.http_port)}/v2/repository/index",
            data=b"{}",
            method="POST",
            headers={TOKEN_HEADER: self._token},
        )
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            body = answer.read()
        return json.loads(body) if body else {}

    def wait_loaded(self, names: list, timeout_s: float) -> dict:
        """Wait until Triton has tried to load every model of ``names``; returns ``{name: reason}`` for the ones that
        did not load (empty when all are ready).

        Raises:
            ServeError: the server exited, or not every model was tried within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        states: dict = {}
        while time.monotonic() < deadline:
            if not self.is_alive():
                raise ServeError(
                    f"tritonserver exited with code {self._proc.returncode} while loading{log_tail(self.log_file, 3)}"
                    + printed(self.output_file, 3)
                )
            try:
                index = self._index(timeout_s=5.0)
                states = {m["name"]: m for m in index if m.get("name") in names}
            except (urllib.error.URLError, OSError, ValueError):
                states = {}
            if len(states) == len(names) and all(m.get("state") in ("READY", "UNAVAILABLE") for m in states.values()):
                return {n: m.get("reason") or "not loaded" for n, m in states.items() if m.get("state") != "READY"}
            time.sleep(0.1)
        seen = ", ".join(f"{n}: {m.get('state')}" for n, m in states.items()) or "no answer"
        raise ServeError(
            f"tritonserver did not load its models within {timeout_s:.0f} s ({seen}){log_tail(self.log_file, 3)}"
        )

    def stop(self, timeout_s: float | None = None) -> int:
        """SIGTERM (Triton finishes the requests in flight, up to its exit timeout), then the exit code; killed when
        it outlives ``timeout_s`` (default: the exit timeout and 30 s)."""
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
        limit = timeout_s if timeout_s is not None else int(self.settings.exit_timeout_s) + 30
        try:
            return self._proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(self._proc.pid, signal.SIGKILL)
            return self._proc.wait(timeout=30)


def exit_reason(code: int | None, output_file: Path | None) -> str | None:
    """``"killed by signal 9 (SIGKILL); it printed (<file>): a | b"`` for a process that ended with ``code`` (a
    ``Popen.returncode``), None for one still running."""
    if code is None:
        return None
    if code < 0:
        try:
            how = f"killed by signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            how = f"killed by signal {-code}"
    else:
        how = f"exit code {code}"
    return how + printed(output_file)


def _end_with_parent() -> None:
    """In the server process before it runs: SIGTERM it when the process that started it dies (Linux), so a serving
    process that is killed leaves no server behind."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the server is stopped by stop() only
        pass
