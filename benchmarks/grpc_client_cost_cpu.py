"""What one gRPC request costs the Python client, on a CPU: the load generator's own CPU per request three ways,
against a real ``tritonserver`` (the pytriton wheel's) serving the null model (``trtkit serve --backend stub`` over
the fake TensorRT and CUDA of the serve tests, answering zeros with no runner), so the server's work is as small as
it gets:

- ``infer``: tritonclient's async ``infer`` with prepared inputs (what ``trtkit bench --server`` does);
- ``raw_stub``: one prebuilt ``ModelInferRequest`` sent through the client's gRPC stub (no request built per call);
- ``stream``: tritonclient's bidirectional ``stream_infer``;
- ``futures``: the prebuilt request through grpc's synchronous stub, ``ModelInfer.future`` (no asyncio): each answer's
  callback, on gRPC's own thread, sends the next request;
- ``wire``: trtkit's own HTTP/2 writer (``trtkit bench --server --grpc --client wire``, :mod:`trtkit.bench.wire`): the
  prebuilt request written straight onto one connection, each answer checked for its output.

Each runs ``--requests`` requests at ``--concurrency`` in flight, ``--repeat`` times, alternating. Needs the serve
extra (``pip install "trtkit[serve]"``).

    python3 benchmarks/grpc_client_cost_cpu.py [--requests 3000] [--concurrency 16] [--repeat 3]

Prints one JSON object: every run's CPU microseconds per request and requests/s, by way, and the load average
before the first; writes it to ``--results`` too (default ``benchmarks/results/grpc-client-cost-cpu.json``; ``-``:
nowhere).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WAYS = ("infer", "raw_stub", "stream", "futures", "wire")


def start_server(work: Path, ports: list) -> subprocess.Popen:
    """``trtkit serve`` of the serve tests' tiny engine as the null model on ``ports`` (HTTP, gRPC, metrics), ready
    when this returns."""
    from tests.serve.conftest import tiny_engine_bytes
    from trtkit.serve.stub_model import NULL_MODEL_ENV

    engine = work / "tiny.engine"
    engine.write_bytes(tiny_engine_bytes())
    status = work / "status.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), NULL_MODEL_ENV: "1"}
    cmd = [sys.executable, str(ROOT / "tests" / "serve" / "serve_child.py"), "serve", str(engine), "--instances", "2",
           "--http-port", str(ports[0]), "--grpc-port", str(ports[1]), "--metrics-port", str(ports[2]),
           "--json", str(status)]
    out = open(work / "serve.out", "wb")  # noqa: SIM115 - open while the server runs
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 120
    while not status.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"trtkit serve did not start: {(work / 'serve.out').read_text()[-2000:]}")
        time.sleep(0.2)
    return proc


async def measure(url: str, requests: int, concurrency: int, repeat: int) -> dict:
    from tritonclient.grpc import aio
    from tritonclient.grpc._utils import _get_inference_request

    client = aio.InferenceServerClient(url)
    meta = await client.get_model_metadata("tiny", as_json=True)
    name, output = meta["inputs"][0]["name"], meta["outputs"][0]["name"]
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    item = aio.InferInput(name, list(x.shape), "FP32")
    item.set_data_from_numpy(x)
    prebuilt = _get_inference_request(model_name="tiny", inputs=[item], model_version="", request_id="",
                                      outputs=None, sequence_id=0, sequence_start=False, sequence_end=False,
                                      priority=0, timeout=None, parameters=None)

    async def calls(way: str) -> None:
        left = [requests]

        async def worker():
            while left[0] > 0:
                left[0] -= 1
                if way == "infer":
                    (await client.infer("tiny", [item], client_timeout=30)).as_numpy(output)
                else:
                    answer = await client._client_stub.ModelInfer(request=prebuilt, timeout=30)
                    if not answer.raw_output_contents:
                        raise RuntimeError("an answer without its output")

        await asyncio.gather(*(worker() for _ in range(concurrency)))

    async def streamed() -> None:
        slots: asyncio.Queue = asyncio.Queue()
        for _ in range(concurrency):
            slots.put_nowait(None)
        sent = [0]

        async def requests_():
            while sent[0] < requests:
                await slots.get()
                sent[0] += 1
                yield {"model_name": "tiny", "inputs": [item]}

        answered = 0
        async for _result, error in client.stream_infer(inputs_iterator=requests_()):
            if error is not None:
                raise RuntimeError(f"stream answer failed: {error}")
            answered += 1
            if answered == requests:
                break
            slots.put_nowait(None)

    def futures() -> None:
        import threading

        import grpc
        from tritonclient.grpc import service_pb2_grpc

        channel = grpc.insecure_channel(url)
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        lock, done = threading.Lock(), threading.Event()
        state: dict = {"sent": concurrency, "answered": 0, "error": None}

        def send():
            stub.ModelInfer.future(prebuilt, timeout=30).add_done_callback(answered)

        def answered(future):
            try:
                if not future.result().raw_output_contents:
                    raise RuntimeError("an answer without its output")
            except Exception as exc:  # noqa: BLE001 - reported below
                state["error"] = exc
                done.set()
                return
            with lock:
                state["answered"] += 1
                more = state["sent"] < requests
                state["sent"] += int(more)
                if state["answered"] == requests:
                    done.set()
            if more:
                send()

        for _ in range(concurrency):
            send()
        finished = done.wait(120)
        channel.close()
        if state["error"] is not None or not finished:
            raise RuntimeError(f"futures: {state['error'] or 'not every request answered in 120 s'}")

    def wired() -> None:
        from trtkit.bench.wire import Outputs, WireClient

        client = WireClient(url, prebuilt.SerializeToString(), Outputs((output,)))
        try:
            latencies, errors, _, _ = client.level(concurrency, 3600.0, requests)
        finally:
            client.close()
        if errors or len(latencies) != requests:
            raise RuntimeError(f"wire: {len(errors)} failed ({errors[:1]}), {len(latencies)} answered")

    runs: dict = {way: [] for way in WAYS}
    try:
        for _ in range(repeat):
            for way in WAYS:
                cpu, wall = time.process_time(), time.perf_counter()
                if way in ("futures", "wire"):
                    await asyncio.to_thread(futures if way == "futures" else wired)
                    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                    runs[way].append({"cpu_us_per_request": round(1e6 * cpu / requests, 1),
                                      "requests_per_s": round(requests / wall, 1)})
                    continue
                await (streamed() if way == "stream" else calls(way))
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                runs[way].append({"cpu_us_per_request": round(1e6 * cpu / requests, 1),
                                  "requests_per_s": round(requests / wall, 1)})
    finally:
        await client.close()
    return runs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--results", default=str(ROOT / "benchmarks" / "results" / "grpc-client-cost-cpu.json"),
                    help="where the JSON goes too (default benchmarks/results/grpc-client-cost-cpu.json; -: nowhere)")
    ap.add_argument("--port", type=int, default=0, help="HTTP port; gRPC and metrics take the next two (default: "
                    "three ports free now)")
    args = ap.parse_args(argv)
    from tests.serve.net import free_ports

    ports = [args.port, args.port + 1, args.port + 2] if args.port else free_ports(3)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="grpc-cost-") as tmp:
        server = start_server(Path(tmp), ports)
        try:
            runs = asyncio.run(measure(f"127.0.0.1:{ports[1]}", args.requests, args.concurrency, args.repeat))
        finally:
            server.terminate()
            server.wait(timeout=60)
    text = json.dumps({"load_average_before": round(load, 2), "requests": args.requests,
                       "concurrency": args.concurrency, "cpus": os.cpu_count(),
                       "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "runs": runs}, indent=2)
    print(text)
    if args.results != "-":
        from trtkit._atomic import write_bytes_atomic

        Path(args.results).parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(Path(args.results), (text + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
