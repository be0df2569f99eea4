"""Engine bytes in, outputs out: CUDA helpers, buffers, the runner, CUDA graphs."""
