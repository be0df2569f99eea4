"""Calibration data sources and algorithms (entropy, min-max, percentile) and calibration cache files."""
