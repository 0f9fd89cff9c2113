"""Prompt templates, their rendering and choices."""
