"""What TensorRT's ONNX parser documents it supports, per version: static tables, no TensorRT needed.

Read by the op check (:mod:`trtkit.builder.opcheck`) and by the compatibility rewrites' parser target
(:mod:`trtkit.builder.rewrites`); the installed parser's own answer always decides.
"""

from __future__ import annotations

# Static knowledge, from onnx-tensorrt's docs/operators.md support tables (release 8.5-GA, whose opset range, up to
# 17, TensorRT 8.6 shares; and TensorRT 10.15). The installed parser's own answer always decides; this only says
# where support exists. Kept small on purpose: only entries those two tables state.
_ADDED_AFTER_8 = {  # "N" in the 8.5 table (or newer than opset 17), "Y" in the 10.15 table
    op: "10.x" for op in (
        "BlackmanWindow", "HammingWindow", "HannWindow", "Hardmax", "IsInf", "LayerNormalization", "STFT",
        "GroupNormalization", "Mish", "DeformConv", "Gelu", "Attention", "RMSNormalization", "RotaryEmbedding",
    )
}
_UNSUPPORTED_AS_OF_10_15 = frozenset({  # "N" in the 10.15 table
    "AffineGrid", "Bernoulli", "BitShift", "BitwiseAnd", "BitwiseNot", "BitwiseOr", "BitwiseXor", "CenterCropPad",
    "Col2Im", "Compress", "ConcatFromSequence", "ConvInteger", "DFT", "Det", "DynamicQuantizeLinear", "ImageDecoder",
    "MatMulInteger", "MaxRoiPool", "MaxUnpool", "MelWeightMatrix", "Multinomial", "NegativeLogLikelihoodLoss",
    "Optional", "OptionalGetElement", "OptionalHasElement", "QLinearConv", "QLinearMatMul", "RegexFullMatch",
    "SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase", "SequenceInsert", "SequenceLength",
    "SequenceMap", "SoftmaxCrossEntropyLoss", "SplitToSequence", "StringConcat", "StringNormalizer", "StringSplit",
    "TfIdfVectorizer", "Unique",
})
# highest ai.onnx opset each parser documents (onnx-tensorrt docs/operators.md)
_MAX_DOCUMENTED_OPSET = ((8,), 17), ((10, 0), 20), ((10, 15), 24)



def added_after_8() -> frozenset:
    """Ops TensorRT's parser gained after 8.x (the 8.5/8.6-era table says "N", the 10.15 one "Y")."""
    return frozenset(_ADDED_AFTER_8)


def unsupported_as_of_10_15() -> frozenset:
    """Ops with no native TensorRT support as of 10.15."""
    return _UNSUPPORTED_AS_OF_10_15


def max_documented_opset(version: tuple) -> int | None:
    """Highest ai.onnx opset the given TensorRT's parser documents, or ``None`` if unknown."""
    best = None
    for since, opset in _MAX_DOCUMENTED_OPSET:
        if tuple(version[: len(since)]) >= since:
            best = opset
    return best
