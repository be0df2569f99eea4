"""``trtkit bench --server ... --grpc --client wire``: trtkit's own HTTP/2 writer of one encoded request, against a real
gRPC server (grpcio's, serving Triton's protocol for made-up models: tests/bench/grpc_fake.py)."""

from __future__ import annotations

import json
import sys
import threading

import pytest

from trtkit.bench import serving, wire
from trtkit.cli import main as cli_main

pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")
pytest.importorskip("hpack", reason="hpack is not installed (pip install 'trtkit[serve]')")

from tests.bench.grpc_fake import FakeTriton  # noqa: E402 - after the skips: it needs grpc


@pytest.fixture
def server():
    with FakeTriton() as fake:
        yield fake


def _load(server, model, **kw):
    settings = serving.LoadSettings(**{"concurrency": (1, 4), "duration_s": 0.4, "warmup_s": 0.05, "grpc": True,
                                       "client": "wire", **kw})
    return serving.load_test(server.address, model, settings)


def test_requests_are_answered_and_timed_at_every_level(server):
    results = _load(server, "small", keep_latencies=True)
    assert [r.concurrency for r in results] == [1, 4]
    for r in results:
        assert r.failed == 0 and r.errors == [] and r.requests > 10
        assert r.p50_ms is not None and 0 < r.p50_ms <= r.p99_ms < 1000
        assert len(r.latencies_ms) == r.requests and r.ips == pytest.approx(r.requests / r.wall_s, rel=0.01)
    # what the server got: the model's input, whole
    request = server.servicer.last_request
    assert request.model_name == "small" and [t.name for t in request.inputs] == ["x"]
    assert len(request.raw_input_contents[0]) == 16


def test_the_request_cap_stops_a_level(server):
    (r,) = _load(server, "small", concurrency=(4,), duration_s=30.0, max_requests=25, warmup_s=0)
    assert r.requests == 25 and r.failed == 0
    assert server.servicer.count == 25


def test_requests_and_answers_larger_than_http2_flow_control_windows_go_through(server):
    # 768 KiB a request (the server's first window is 64 KiB) and 1 MiB an answer, 4 in flight on one connection
    results = _load(server, "large", concurrency=(4,), duration_s=0.5)
    assert results[0].failed == 0 and results[0].requests >= 4, results[0].errors


def test_an_answer_without_its_output_data_counts_as_failed(server):
    (r,) = _load(server, "hollow", concurrency=(2,), duration_s=0.2, warmup_s=0)
    assert r.requests == 0 and r.failed > 0
    assert r.errors == ["ServeError: Output 'y' came back without its data (0 of 16 bytes)"]


def test_a_refused_request_is_counted_with_the_servers_reason_and_the_load_goes_on(server):
    (r,) = _load(server, "picky", concurrency=(3,), duration_s=0.4, warmup_s=0)
    assert r.requests > 0 and r.failed > 0
    assert r.failed == pytest.approx((r.requests + r.failed) / 3, abs=3)
    assert r.errors == ["ServeError: gRPC status 3: input 'x' refused: every third one is"]


def test_a_request_past_its_time_fails_with_grpcs_deadline(server):
    (r,) = _load(server, "slow", concurrency=(2,), duration_s=0.05, warmup_s=0, timeout_s=0.1)
    # the server gives up at the deadline the request carries (grpc-timeout), or the client at its own, first
    assert r.requests == 0 and r.failed == 2
    assert set(r.errors) <= {"ServeError: gRPC status 4: Deadline Exceeded", "ServeError: no answer within 0.1 s"}


def test_a_server_that_never_answers_is_given_up_on_at_the_timeout():
    import socket

    with socket.socket() as listener:  # takes the connection, reads, never writes a byte
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        address = "127.0.0.1:%d" % listener.getsockname()[1]
        client = wire.WireClient(address, _encoded("small"), wire.Outputs(("y",)), timeout_s=0.2)
        latencies, errors, wall, _ = client.level(3, 0.05, 10**6)
        client.close()
    assert not latencies and errors == ["ServeError: no answer within 0.2 s"] * 3 and wall < 2.0


def test_requests_are_spread_over_the_connections(server):
    (r,) = _load(server, "small", concurrency=(6,), duration_s=0.3, connections=3)
    assert r.failed == 0 and len(server.servicer.peers) == 3


def test_a_server_that_goes_away_mid_level_fails_what_was_in_flight_and_ends_the_level(server):
    client = wire.WireClient(server.address, _encoded("slow"), wire.Outputs(("y",)), connections=2)
    threading.Timer(0.1, server.server.stop, kwargs={"grace": None}).start()
    latencies, errors, wall, _ = client.level(4, 5.0, 10**6)
    client.close()
    assert not latencies and len(errors) >= 4 and wall < 4.0
    # grpc's server cancels what it has (UNAVAILABLE), then closes the connections
    assert all(e.startswith(("ServeError: gRPC status 14", "ServeError: the server")) for e in errors), errors


def test_a_connection_out_of_stream_ids_hands_the_load_to_the_others(server):
    client = wire.WireClient(server.address, _encoded("small"), wire.Outputs(("y",)), connections=2)
    client.connections[0].next_stream = wire.MAX_WINDOW  # its last stream id (2**31 - 1)
    latencies, errors, _, _ = client.level(4, 0.3, 10**6)
    client.close()
    assert not errors and len(latencies) > 10
    assert client.connections[0].next_stream == wire.MAX_WINDOW + 2  # one request sent there, the rest on the other


def test_no_server_is_named(server):
    address = server.address
    server.server.stop(grace=None)
    with pytest.raises(serving.ServeError, match=f"No gRPC server answers at {address}"):
        wire.WireClient(address, _encoded("small"), wire.Outputs(("y",)))


def _encoded(model: str) -> bytes:
    import numpy as np
    from tritonclient.grpc import service_pb2

    from tests.bench.grpc_fake import SHAPES

    request = service_pb2.ModelInferRequest(model_name=model)
    request.inputs.add(name="x", datatype="FP32", shape=SHAPES[model])
    request.raw_input_contents.append(np.ones(SHAPES[model], np.float32).tobytes())
    return request.SerializeToString()


def test_hpack_integers_as_rfc_7541_encodes_them():
    assert wire.hpack_int(10, 5) == b"\x0a"  # C.1.1
    assert wire.hpack_int(1337, 5) == b"\x1f\x9a\x0a"  # C.1.2
    assert wire.hpack_int(42, 8) == b"\x2a"  # C.1.3


def test_the_request_header_block_decodes_to_a_grpc_call():
    from hpack import Decoder

    block = wire.request_headers("127.0.0.1:8001", timeout_s=2.5)
    assert Decoder().decode(block) == [
        (":method", "POST"), (":scheme", "http"), (":path", "/inference.GRPCInferenceService/ModelInfer"),
        (":authority", "127.0.0.1:8001"), ("content-type", "application/grpc"), ("te", "trailers"),
        ("user-agent", "trtkit-wire"), ("grpc-timeout", "2500m"),
    ]


def test_a_server_header_block_that_needs_a_header_table_is_named():
    with pytest.raises(serving.ServeError, match="does not decode on its own.*client='tritonclient'"):
        wire.read_header_block(b"\xbe")  # index 62: the first entry of a header table the client asked not to have


def test_without_hpack_the_wire_client_says_how_to_get_it(monkeypatch, server):
    monkeypatch.setitem(sys.modules, "hpack", None)
    with pytest.raises(serving.DependencyError, match=r'hpack .*pip install "trtkit\[serve\]"'):
        wire.WireClient(server.address, _encoded("small"), wire.Outputs(("y",)))


@pytest.mark.parametrize("args, says", [
    (["--client", "wire"], "--client 'wire' sends gRPC calls, one per request: it needs gRPC and no streaming; or "
     "use --client 'tritonclient'"),
    (["--client", "wire", "--grpc", "--streaming"], "it needs gRPC and no streaming"),
    (["--grpc", "--client", "wire", "--connections", "0"], "--connections must be 1 or more, not 0"),
    (["--grpc", "--client", "grpcio"], "--client 'grpcio': give one of tritonclient, wire"),
    (["--grpc", "--connections", "4"], "--connections 4 is for the wire client (tritonclient keeps one channel a "
     "process); use the wire client or leave --connections at 1"),
])
def test_wire_client_refusals(args, says, capsys):
    assert cli_main.main(["bench", "--server", "127.0.0.1:1", "--model", "m", *args]) == 2
    assert says in capsys.readouterr().err


def test_the_cli_loads_with_the_wire_client_and_says_so(server, tmp_path, capsys):
    out = tmp_path / "load.json"
    code = cli_main.main(["bench", "--server", server.address, "--model", "small", "--grpc", "--client", "wire",
                          "--connections", "2", "--concurrency", "2", "--duration-s", "0.3", "--json", str(out)])
    assert code == 0, capsys.readouterr()
    data = json.loads(out.read_text())
    assert data["client"] == "wire" and data["connections"] == 2
    assert data["concurrency"]["2"]["failed"] == 0 and data["concurrency"]["2"]["requests"] > 0
    assert "wire client, 2 connection(s)" in capsys.readouterr().out
