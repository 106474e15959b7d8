"""Benchmarks: ratios against a baseline measured in the same run, printed as tables (never timed tests)."""
