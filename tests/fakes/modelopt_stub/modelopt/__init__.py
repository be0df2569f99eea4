"""A stand-in for NVIDIA ModelOpt's ONNX PTQ (``benchmarks/int8_vs_modelopt_h200.py --fake``): put this folder on
``PYTHONPATH``; ``modelopt.onnx.quantization.quantize`` writes a Q/DQ model without calibrating."""
