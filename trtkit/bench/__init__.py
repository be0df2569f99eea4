"""Measurement: timers, statistics, reports."""
