"""celtk — Capability Enhancement Localization toolkit."""
__version__ = "0.1.0"
