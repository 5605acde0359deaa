"""Runs and their records: sweep, bench, realgap, trees, the results store, intervals, and
every figure (experiments.plots)."""
