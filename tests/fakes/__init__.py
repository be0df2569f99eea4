"""Test doubles shaped like TensorRT and cuda-python, for CPU tests and for users testing code built on trtkit."""
