"""Tuning: the tuner, verification, the measurement store, datasets, reports and configuration files."""
