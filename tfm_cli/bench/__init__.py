"""Benchmarks: attention across lengths, training throughput, translation throughput, peers, and the CI gate.

Each benchmark returns plain data, {"kind", "environment", "settings", "records", "summary"}; only the CLI draws
it. Speed is measured here, never asserted in tests: machines are shared and noisy.
"""
