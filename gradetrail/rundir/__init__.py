"""The run directory: its layout, result rows, manifest, run log and summary."""
