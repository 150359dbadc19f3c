"""The package version: one place, read by the package, its provenance records and pyproject.toml."""

__version__ = "0.1.0"
