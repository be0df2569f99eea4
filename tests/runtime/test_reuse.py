"""Numpy inputs passed again are page-locked where they are and sent from there (no host copy), on the fake backend:
when it happens and when not, results, what reads in place (sync calls only), and what is undone when the array dies
or the runner closes. The fake CUDA faults when a queued copy reads host memory that stopped being page-locked."""

from __future__ import annotations

import gc
import logging

import numpy as np
import pytest

from tests import models
from tests.fakes.fake_cuda import FakeCudart
from tests.fakes.fake_trt import make_fake_trt
from tests.runtime.fakes import fake_engine_bytes
from trtkit.errors import UsageError
from trtkit.runtime import TrtRunner
from trtkit.runtime.cuda import Cuda
from trtkit.runtime.reuse import MIN_BYTES, ReusedInputs

SIZE = 96  # (1, 3, 96, 96) float32: 108 KiB per image, above MIN_BYTES
PROFILE = {"x": [[1, 3, SIZE, SIZE], [2, 3, SIZE, SIZE], [4, 3, SIZE, SIZE]]}


@pytest.fixture(scope="module")
def model():
    return models.tiny_conv(size=SIZE)


@pytest.fixture(scope="module")
def engine(model):
    return fake_engine_bytes(model, [PROFILE], "8.6.0")


@pytest.fixture
def rt():
    return FakeCudart()


def make(engine, rt, **kwargs) -> TrtRunner:
    return TrtRunner(engine, trt=make_fake_trt("8.6.0"), cuda=Cuda(rt), **kwargs)


def image(batch=1, seed=0):
    return np.random.default_rng(seed).standard_normal((batch, 3, SIZE, SIZE)).astype(np.float32)


def expected(model, x):
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model).run(None, {"x": x})[0]


def h2d_sources(rt, before: int) -> int:
    return rt.calls["cudaMemcpyAsync"] - before


@pytest.mark.parametrize("graph", [False, True])
def test_an_array_passed_again_is_page_locked_and_read_where_it_is(model, engine, rt, graph):
    x = image()
    with make(engine, rt, cuda_graph=graph) as r:
        first = r.infer({"x": x})["y"]
        assert rt.live_allocations()["registered"] == 0  # seen once: copied as before
        for seed in range(1, 5):
            x[...] = image(seed=seed)  # the application refills its buffer in place
            out = r.infer({"x": x})["y"]
            np.testing.assert_allclose(out, expected(model, x), rtol=1e-5)
            assert rt.live_allocations()["registered"] == 1
        assert rt.calls["cudaHostRegister"] == 1
        assert r.stats().arrays_page_locked == 1
    np.testing.assert_allclose(first, expected(model, image()), rtol=1e-5)
    assert rt.live_allocations() == {"device": 0, "host": 0, "streams": 0, "events": 0, "graphs": 0, "registered": 0}


def test_locked_input_skips_the_host_copy(engine, rt, monkeypatch):
    from trtkit.runtime import runner as runner_module

    copies = []
    real = runner_module.copy_into
    monkeypatch.setattr(runner_module, "copy_into", lambda dst, src: (copies.append(src), real(dst, src)))
    x = image()
    with make(engine, rt, cuda_graph=True) as r:
        for _ in range(5):
            r.infer({"x": x})
        assert len(copies) == 1  # the first call only: then the graph sends x from where it is
        fresh = [image(seed=s) for s in range(3)]
        for y in fresh:
            r.infer({"x": y})
        assert len(copies) == 4  # arrays seen once are copied


def test_fresh_arrays_every_call_are_never_page_locked(engine, rt):
    with make(engine, rt, cuda_graph=True) as r:
        for seed in range(20):
            r.infer({"x": image(seed=seed)})
        assert rt.calls["cudaHostRegister"] == 0


def test_small_and_noncontiguous_inputs_are_copied(rt):
    small = models.tiny_conv()  # (N, 3, 8, 8): 768 bytes per image
    engine = fake_engine_bytes(small, [{"x": [[1, 3, 8, 8], [2, 3, 8, 8], [4, 3, 8, 8]]}], "8.6.0")
    tiny = np.ones((1, 3, 8, 8), np.float32)
    assert tiny.nbytes < MIN_BYTES
    big_engine = fake_engine_bytes(models.tiny_conv(size=SIZE), [PROFILE], "8.6.0")
    strided = np.repeat(image(), 2, axis=3)[..., ::2]  # every other column: not contiguous
    assert strided.shape == (1, 3, SIZE, SIZE) and not strided.flags.c_contiguous
    with make(engine, rt, cuda_graph=True) as r:
        for _ in range(3):
            r.infer({"x": tiny})
    with make(big_engine, rt, cuda_graph=True) as r:
        for _ in range(3):
            np.testing.assert_allclose(r.infer({"x": strided})["y"], r.infer({"x": strided.copy()})["y"])
    assert rt.calls["cudaHostRegister"] == 0


def test_infer_async_copies_so_the_caller_may_refill_at_once(model, engine, rt):
    x = image(seed=1)
    with make(engine, rt, cuda_graph=True) as r:
        for _ in range(3):
            r.infer({"x": x})  # page-locked now
        handle = r.infer_async({"x": x})
        want = expected(model, x)
        x[...] = 0  # refilled before the async call ran
        np.testing.assert_allclose(handle.wait()["y"], want, rtol=1e-5)


def test_a_dead_array_is_unregistered_and_its_graph_dropped(model, engine, rt):
    with make(engine, rt, cuda_graph=True) as r:
        x = image(seed=1)
        for _ in range(3):
            r.infer({"x": x})
        graphs = rt.live_allocations()["graphs"]
        del x
        gc.collect()
        assert rt.live_allocations()["registered"] == 0  # unregistered before numpy freed the memory
        y = image(seed=2)  # may well land where x was
        np.testing.assert_allclose(r.infer({"x": y})["y"], expected(model, y), rtol=1e-5)
        assert rt.live_allocations()["graphs"] < graphs  # x's graph was destroyed, none made for y yet
        for _ in range(2):
            np.testing.assert_allclose(r.infer({"x": y})["y"], expected(model, y), rtol=1e-5)
        assert rt.live_allocations()["registered"] == 1


def test_two_runners_given_one_array_both_answer(model, engine, rt, caplog):
    x = image(seed=3)
    with make(engine, rt, cuda_graph=True) as a, make(engine, rt, cuda_graph=True) as b:
        with caplog.at_level(logging.DEBUG, logger="trtkit"):
            for _ in range(3):
                np.testing.assert_allclose(a.infer({"x": x})["y"], expected(model, x), rtol=1e-5)
                np.testing.assert_allclose(b.infer({"x": x})["y"], expected(model, x), rtol=1e-5)
        assert rt.live_allocations()["registered"] == 1  # the second runner's attempt was refused: it copies
        assert rt.calls["cudaHostRegister"] == 2
        assert "copied, not page-locked in place" in caplog.text and "AlreadyRegistered" in caplog.text
    assert rt.live_allocations()["registered"] == 0


def test_the_runners_views_are_not_registered(engine, rt):
    with make(engine, rt, cuda_graph=True, copy_outputs=False) as r:
        views = r.host_inputs({"x": (1, 3, SIZE, SIZE)})
        views["x"][...] = image()
        for _ in range(4):
            r.infer(views)
        assert rt.calls["cudaHostRegister"] == 0


def test_at_most_max_arrays_stay_page_locked(engine, rt, monkeypatch):
    from trtkit.runtime import reuse

    monkeypatch.setattr(reuse, "MAX_ARRAYS", 2)
    arrays = [image(seed=s) for s in range(4)]
    with make(engine, rt, cuda_graph=True) as r:
        for _ in range(3):
            for x in arrays:
                r.infer({"x": x})
        assert rt.live_allocations()["registered"] == 2


def test_switched_off_nothing_is_registered(engine, rt):
    x = image()
    with make(engine, rt, cuda_graph=True, pin_reused_inputs=False) as r:
        for _ in range(4):
            r.infer({"x": x})
    assert rt.calls["cudaHostRegister"] == 0


def test_pin_reused_inputs_must_be_a_bool(engine, rt):
    with pytest.raises(UsageError, match="pin_reused_inputs must be True or False, not 'yes'"):
        make(engine, rt, pin_reused_inputs="yes")
    with make(engine, rt) as r, pytest.raises(UsageError, match="pin_reused_inputs must be True or False, not 1"):
        r.pin_reused_inputs = 1


def test_switching_off_while_active_unregisters_and_drops_their_graphs(model, engine, rt):
    x = image(seed=4)
    with make(engine, rt, cuda_graph=True) as r:
        for _ in range(3):
            r.infer({"x": x})
        graphs = rt.live_allocations()["graphs"]
        r.pin_reused_inputs = False
        assert rt.live_allocations()["registered"] == 0 and rt.live_allocations()["graphs"] < graphs
        for _ in range(3):
            np.testing.assert_allclose(r.infer({"x": x})["y"], expected(model, x), rtol=1e-5)
        assert rt.live_allocations()["registered"] == 0
        r.pin_reused_inputs = True
        for _ in range(2):
            np.testing.assert_allclose(r.infer({"x": x})["y"], expected(model, x), rtol=1e-5)
        assert rt.live_allocations()["registered"] == 1


def test_the_fake_faults_on_a_queued_copy_from_memory_unregistered_meanwhile(rt):
    """What the tests above rely on: reading an array after it stopped being page-locked is caught."""
    cuda = Cuda(rt)
    reused = ReusedInputs(cuda)
    x = image()
    assert reused.locked(x, call=1) is None and reused.locked(x, call=1) is None  # one call: one sighting
    entry = reused.locked(x, call=2)
    stream, dev = cuda.stream_create(), cuda.malloc(x.nbytes)
    cuda.memcpy_htod_async(dev, entry.ptr, x.nbytes, stream)
    reused.clear()
    with pytest.raises(RuntimeError, match="stopped being page-locked"):
        cuda.stream_synchronize(stream)


def test_arrays_dying_young_make_the_runner_stop_page_locking(model, engine, rt, caplog):
    """Each frame's array given to two calls, then dropped: page-locking it (and capturing a graph) every frame would
    cost more than the copies; after a few such arrays the runner copies instead."""
    from trtkit.runtime.reuse import MAX_SHORT_LIVED

    with make(engine, rt, cuda_graph=True) as r, caplog.at_level(logging.INFO, logger="trtkit"):
        for frame in range(MAX_SHORT_LIVED + 6):
            x = image(seed=frame)
            for _ in range(2):
                np.testing.assert_allclose(r.infer({"x": x})["y"], expected(model, x), rtol=1e-5)
            del x
        assert rt.calls["cudaHostRegister"] == MAX_SHORT_LIVED
        assert "now copies new arrays instead" in caplog.text
        kept = image(seed=99)
        for _ in range(3):
            r.infer({"x": kept})
        assert rt.live_allocations()["registered"] == 0


def test_a_long_lived_array_does_not_count_as_dying_young(engine, rt):
    from trtkit.runtime.reuse import MAX_SHORT_LIVED, SHORT_LIVED_CALLS

    with make(engine, rt, cuda_graph=True) as r:
        for frame in range(MAX_SHORT_LIVED + 2):
            x = image(seed=frame)
            for _ in range(SHORT_LIVED_CALLS + 2):
                r.infer({"x": x})
            del x
        assert rt.calls["cudaHostRegister"] == MAX_SHORT_LIVED + 2


def test_an_array_dropped_on_another_thread_is_unregistered_there(model, engine, rt):
    import threading

    with make(engine, rt, cuda_graph=True) as r:
        holder = [image(seed=5)]
        for _ in range(3):
            r.infer({"x": holder[0]})
        assert rt.live_allocations()["registered"] == 1
        worker = threading.Thread(target=holder.clear)  # the last reference goes on the worker thread
        worker.start()
        worker.join()
        assert rt.live_allocations()["registered"] == 0
        y = image(seed=6)
        for _ in range(3):
            np.testing.assert_allclose(r.infer({"x": y})["y"], expected(model, y), rtol=1e-5)
        assert rt.live_allocations()["registered"] == 1


def test_the_graphs_keyed_by_a_dead_arrays_registration_go_with_it(model, engine, rt):
    def serials(r):
        return {src[0] for key in r.graphs() for src in key.sources if src is not None and src[0]}

    with make(engine, rt, cuda_graph=True) as r:
        x = image(seed=7)
        for _ in range(4):  # copied and captured, page-locked and captured, replayed (the shortcut made), shortcut
            r.infer({"x": x})
        assert r.stats().host_replays == 1 and len(serials(r)) == 1
        del x
        gc.collect()
        y = image(seed=8)
        np.testing.assert_allclose(r.infer({"x": y})["y"], expected(model, y), rtol=1e-5)
        assert serials(r) == set() and r.stats().graphs == 1  # the graph sending from the pinned buffer stays
        assert r.stats().host_replays == 1  # y took the general path: its source (copied) had no shortcut yet
