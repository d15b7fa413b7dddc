"""Benchmarks that print ratios measured in one run (``workbench bench ...``)."""
