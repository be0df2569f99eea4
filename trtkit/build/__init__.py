"""ONNX model in, engine bytes out: network, config, profiles, precision, timing cache, manifest."""
