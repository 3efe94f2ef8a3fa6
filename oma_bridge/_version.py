"""The version of oma-bridge, importable from any floor of the package."""

__version__ = "0.1.0"
