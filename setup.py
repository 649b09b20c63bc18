"""Shim for Beam's --setup_file, which ships this package to Dataflow workers; the project is
defined in pyproject.toml."""

from setuptools import setup

setup()
