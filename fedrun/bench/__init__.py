"""Benchmarks of the executors and the add-ons (``python -m fedrun.bench.workloads``)."""
