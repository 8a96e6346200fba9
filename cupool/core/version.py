"""cupool's version, on the lowest floor so that any module can report it without
importing the package front (``cupool.__version__`` re-exports it)."""

__version__ = "0.1.0"
