"""Enums of the fake ``tensorrt`` module, with the members each TensorRT version really has.

Member values are arbitrary here (as TensorRT 11 renumbered them): code must build masks from names.
"""

from __future__ import annotations

import enum


def _major(version: str) -> int:
    return int(version.split(".")[0])


def builder_flags(version: str) -> list:
    names = [
        "GPU_FALLBACK",
        "REFIT",
        "DISABLE_TIMING_CACHE",
        "TF32",
        "SPARSE_WEIGHTS",
        "SAFETY_SCOPE",
        "DIRECT_IO",
        "VERSION_COMPATIBLE",
        "EXCLUDE_LEAN_RUNTIME",
        "DEBUG",
    ]
    if _major(version) < 11:  # removed in 11 (strongly typed networks take their types from the model)
        names += [
            "FP16",
            "INT8",
            "FP8",
            "OBEY_PRECISION_CONSTRAINTS",
            "PREFER_PRECISION_CONSTRAINTS",
            "REJECT_EMPTY_ALGORITHMS",
        ]
    if _major(version) == 10:
        names += ["BF16"]
    return names


def tactic_sources(version: str) -> list:
    if _major(version) >= 11:
        return ["EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS"]
    return ["CUBLAS", "CUBLAS_LT", "CUDNN", "EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS"]


def network_flags(version: str) -> list:
    major = _major(version)
    if major >= 11:
        return ["STRONGLY_TYPED"]
    if major == 10:
        return ["EXPLICIT_BATCH", "STRONGLY_TYPED"]
    return ["EXPLICIT_BATCH", "EXPLICIT_PRECISION"]


def make(name: str, members: list) -> type[enum.IntEnum]:
    return enum.IntEnum(name, {m: i for i, m in enumerate(members)})  # type: ignore[return-value]  # the functional API makes a class


def common_enums(version: str) -> dict:
    """Every enum of the fake module for ``version``, by attribute name."""
    data_types = ["FLOAT", "HALF", "INT8", "INT32", "BOOL", "UINT8", "FP8"]
    if _major(version) >= 10:
        data_types += ["BF16", "INT64", "INT4"]
    parts = tuple(int(p) for p in version.split(".")[:2])
    if parts >= (10, 8):  # the real bindings: FP4 from 10.8, E8M0 from 10.16 (tests/surface checks them)
        data_types += ["FP4"]
    if parts >= (10, 16):
        data_types += ["E8M0"]
    return {
        "BuilderFlag": make("BuilderFlag", builder_flags(version)),
        "TacticSource": make("TacticSource", tactic_sources(version)),
        "NetworkDefinitionCreationFlag": make("NetworkDefinitionCreationFlag", network_flags(version)),
        "MemoryPoolType": make(
            "MemoryPoolType", ["WORKSPACE", "DLA_MANAGED_SRAM", "DLA_LOCAL_DRAM", "DLA_GLOBAL_DRAM", "TACTIC_DRAM"]
        ),
        "ProfilingVerbosity": make("ProfilingVerbosity", ["LAYER_NAMES_ONLY", "NONE", "DETAILED"]),
        "LayerInformationFormat": make("LayerInformationFormat", ["ONELINE", "JSON"]),
        "HardwareCompatibilityLevel": make("HardwareCompatibilityLevel", ["NONE", "AMPERE_PLUS"]),
        "DataType": make("DataType", data_types),
        "LayerType": make(
            "LayerType",
            [
                "CONVOLUTION",
                "ACTIVATION",
                "POOLING",
                "ELEMENTWISE",
                "SHUFFLE",
                "REDUCE",
                "MATRIX_MULTIPLY",
                "DECONVOLUTION",
                "SOFTMAX",
                "QUANTIZE",
                "DEQUANTIZE",
            ]
            + (["FULLY_CONNECTED"] if _major(version) < 10 else []),
        ),
        "TensorIOMode": make("TensorIOMode", ["NONE", "INPUT", "OUTPUT"]),
        "ErrorCode": make(
            "ErrorCode",
            [
                "SUCCESS",
                "INTERNAL_ERROR",
                "MEM_ALLOC_FAILED",
                "MODEL_DESERIALIZE_FAILED",
                "INVALID_VALUE",
                "INVALID_GRAPH",
                "INVALID_NODE",
                "UNSUPPORTED_GRAPH",
                "UNSUPPORTED_NODE",
            ],
        ),
    }
