"""Choosing a strategy, building the optimizer, fit/resume/export, the CLI entry points."""
