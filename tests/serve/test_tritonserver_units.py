"""The tritonserver process trtkit runs (:class:`trtkit.serve.tritonserver.TritonProcess`), without Triton: a server
that dies while loading or serving is named with what it left behind, and settings reach its command line."""

from __future__ import annotations

import pytest


def test_a_server_that_dies_while_loading_is_named_with_the_end_of_its_log(tmp_path):
    """What a user sees when tritonserver exits early (a port taken, a backend that does not load): the exit code
    and the last lines of Triton's own log, not only the code."""
    import subprocess
    import sys

    from trtkit.errors import ServeError
    from trtkit.serve.tritonserver import TritonProcess

    log = tmp_path / "triton.log"
    log.write_text("I1201 starting\nE1201 failed to bind to 0.0.0.0:8001: Address already in use\nI1201 exiting\n")
    server = TritonProcess.__new__(TritonProcess)  # the process part only: no tritonserver is needed for this
    server.log_file = log
    server._proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    server._proc.wait()
    with pytest.raises(ServeError, match=r"exited with code 3 while loading; the end of Triton.s log \(.*triton.log\): "
                                         r"I1201 starting \| E1201 failed to bind.*Address already in use"):
        server.wait_loaded(["m"], timeout_s=5)


def test_a_server_that_dies_while_serving_says_how_and_what_it_printed(tmp_path):
    """A crash (Triton prints the signal and its stack to stderr, not to its log) is named with what it printed."""
    import signal
    import subprocess
    import sys

    from trtkit.serve.logs import console_path
    from trtkit.serve.tritonserver import TritonProcess

    log = tmp_path / "triton.log"
    server = TritonProcess.__new__(TritonProcess)
    server.log_file, server.output_file = log, console_path(log)
    assert server.output_file == tmp_path / "triton.log.stderr"
    with open(server.output_file, "wb") as out:
        server._proc = subprocess.Popen(
            [sys.executable, "-c", "import os, sys, time; print('Signal (11) received.'); print(' 0# 0x55 in "
             "tritonserver', flush=True); os.kill(os.getpid(), 9)"], stdout=out, stderr=subprocess.STDOUT)
    server._proc.wait()
    assert server.exit_reason() == (f"killed by signal 9 (SIGKILL); it printed ({server.output_file}): "
                                    "Signal (11) received. | 0# 0x55 in tritonserver")
    # a caught signal's stack is quoted from the signal on: the frames nearest the crash
    server.output_file.write_text("I1203 serving\nSignal (11) received.\n" + "".join(f" {i}# f{i}\n" for i in range(9)))
    assert server.exit_reason().endswith("): Signal (11) received. | 0# f0 | 1# f1 | 2# f2 | 3# f3 | 4# f4")
    server._proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])
    server._proc.wait()
    server.output_file.write_text("")
    assert server.exit_reason() == "exit code 1"  # nothing printed: nothing quoted
    server._proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert server.exit_reason() is None  # still running
    finally:
        server._proc.send_signal(signal.SIGKILL)
        server._proc.wait()


@pytest.mark.parametrize("pool, flag", [(None, None), (64, "--grpc-infer-allocation-pool-size=64")])
def test_the_grpc_allocation_pool_reaches_tritonservers_command_line(tmp_path, monkeypatch, pool, flag):
    from trtkit.serve import tritonserver
    from trtkit.serve.server import ServeSettings

    started = []
    monkeypatch.setattr(tritonserver, "prepare_server", lambda workspace, stub, backends: tmp_path)
    monkeypatch.setattr(tritonserver.subprocess, "Popen", lambda command, **kwargs: started.append(command))
    settings = ServeSettings(grpc_allocation_pool=pool)
    tritonserver.TritonProcess(tmp_path / "repo", settings, tmp_path, tmp_path / "triton.log", env={})
    (command,) = started
    pools = [a for a in command if a.startswith("--grpc-infer-allocation-pool-size")]
    assert pools == ([flag] if flag else [])  # none given: Triton's own default
