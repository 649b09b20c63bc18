"""torch and transformers, imported on first use: the modules that compare against them are
collected by every test worker, and importing both costs each worker seconds before its first
case, most of them cases that never touch either."""

import importlib


class _Lazy:
    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self._name), attr)


torch = _Lazy("torch")
transformers = _Lazy("transformers")
