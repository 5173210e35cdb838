"""celtk's version, in a module of its own so that stages and the CLI read it without importing the package
``celtk`` itself (an upward import from every module that records the version)."""

__version__ = "0.1.0"
