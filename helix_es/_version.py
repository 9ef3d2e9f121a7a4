"""The package version, in a module of its own so the CLI need not import the package root."""

__version__ = "0.8.0"
