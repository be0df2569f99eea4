"""Run in a child process with one TensorRT version's real bindings on PYTHONPATH; prints JSON facts about how
trtkit's precision planning and native calibrator behave against that version's real API."""

import json

import numpy as np


def main() -> dict:
    import tensorrt as trt

    from trtkit._version_compat import capabilities
    from trtkit.builder.precision import resolve_half_mode, resolve_int8_mode

    caps = capabilities(trt)
    facts = {"version": trt.__version__, "modes": {}}
    for what, fn in (("fp16", lambda m: resolve_half_mode(caps, "fp16", m)),
                     ("bf16", lambda m: resolve_half_mode(caps, "bf16", m)),
                     ("int8", lambda m: resolve_int8_mode(caps, m))):
        for mode in ("auto", "flag" if what != "int8" else "calibrator", "cast" if what != "int8" else "qdq"):
            try:
                facts["modes"][f"{what}/{mode}"] = fn(mode)
            except Exception as exc:  # the error class and text are what the test checks
                facts["modes"][f"{what}/{mode}"] = f"{type(exc).__name__}: {exc}"
    facts["calibrators"] = _calibrators(trt) if caps.has_calibrators else None
    return facts


def _calibrators(trt) -> dict:
    from calibrators.cache import Provenance
    from calibrators.session import CalibrationSession
    from calibrators.sources import IterableSource
    from calibrators.trt_calibrator import make_calibrator
    from tests.fakes.fake_cuda import FakeCudart
    from trtkit.builder.config import CalibrationSettings
    from trtkit.runtime.cuda import Cuda

    out = {}
    for algorithm in ("entropy", "minmax"):
        data = IterableSource([{"x": np.ones((2, 3), np.float32)}])
        settings = CalibrationSettings(source=data, algorithm=algorithm)
        session = CalibrationSession(settings, data, 2, Provenance("0" * 64, trt.__version__, algorithm))
        calibrator = make_calibrator(trt, session, cuda=Cuda(FakeCudart()))
        first, second = calibrator.get_batch(["x"]), calibrator.get_batch(["x"])
        calibrator.raise_if_failed()
        out[algorithm] = {"is_calibrator": isinstance(calibrator, trt.IInt8Calibrator),
                          "algorithm": str(calibrator.get_algorithm()), "batch_size": calibrator.get_batch_size(),
                          "first": len(first or []), "second": second}
    return out


if __name__ == "__main__":
    print(json.dumps(main()))
