"""Engines out to other runtimes: a Triton Inference Server model repository (:mod:`trtkit.export.triton`)."""
