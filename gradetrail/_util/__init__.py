"""Shared utilities below every layer: JSON and terminal text, typed slots, user code
off the run's loop."""
