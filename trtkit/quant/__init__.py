"""Changes to a model's precision: FP16 conversion, Q/DQ insertion, histograms."""
