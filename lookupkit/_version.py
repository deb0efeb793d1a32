"""The version, written once: pyproject.toml reads it (dynamic version), __init__ and the writers import it."""

__version__ = "0.1.0"
