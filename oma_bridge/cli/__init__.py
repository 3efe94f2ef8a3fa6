"""The ``oma-bridge`` command line: thin over the library; the one place that prints."""

from ._main import main

__all__ = ("main",)
