"""Streaming pipelines: video files and image folders through an engine at the speed of the slowest stage.

``source → preprocess → infer (batched, RunnerPool) → postprocess → annotate → sink``, each stage on its own
thread(s), joined by bounded queues. Layout: :mod:`~trtkit.pipeline.stages` (frames, stages, queues),
:mod:`~trtkit.pipeline.batching` (the inference stage), :mod:`~trtkit.pipeline.sources`,
:mod:`~trtkit.pipeline.sinks`, :mod:`~trtkit.pipeline.stats` (timing and the report),
:mod:`~trtkit.pipeline.video` (PyAV and NVDEC), :mod:`~trtkit.pipeline.device_frames` (NVDEC frames kept and
preprocessed on the GPU), :mod:`~trtkit.pipeline.preprocess` (the pre/post protocol), :mod:`~trtkit.pipeline.views`
(multi-view models), :mod:`~trtkit.pipeline.pipeline` (the threads), :mod:`~trtkit.pipeline.api` (:func:`run_engine`).

Importing this package imports neither PyAV, PyNvVideoCodec, TensorRT nor cuda-python.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "run_engine": "trtkit.pipeline.api",
    "Processing": "trtkit.pipeline.api",
    "Pipeline": "trtkit.pipeline.pipeline",
    "InferStep": "trtkit.pipeline.pipeline",
    "Stage": "trtkit.pipeline.stages",
    "Frame": "trtkit.pipeline.stages",
    "BatchPlan": "trtkit.pipeline.batching",
    "BatchRing": "trtkit.pipeline.batching",
    "ArraySource": "trtkit.pipeline.sources",
    "ImageFolderSource": "trtkit.pipeline.sources",
    "VideoSource": "trtkit.pipeline.sources",
    "MultiViewSource": "trtkit.pipeline.views",
    "ViewSink": "trtkit.pipeline.views",
    "VideoSink": "trtkit.pipeline.sinks",
    "ImageFolderSink": "trtkit.pipeline.sinks",
    "JsonLinesSink": "trtkit.pipeline.sinks",
    "CallbackSink": "trtkit.pipeline.sinks",
    "ImagePreprocess": "trtkit.pipeline.preprocess",
    "PipelineReport": "trtkit.pipeline.stats",
    "detection_processing": "trtkit.pipeline.detect",
    "pose_processing": "trtkit.pipeline.pose",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'trtkit.pipeline' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
