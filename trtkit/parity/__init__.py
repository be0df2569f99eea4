"""Comparisons of an engine against its ONNX model."""
