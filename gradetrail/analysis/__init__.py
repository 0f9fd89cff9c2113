"""Comparing and exporting runs: the gate, the diff, export."""
