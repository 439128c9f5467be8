"""Batch runs: sweeps of many simulations, their cell store and where they run."""
