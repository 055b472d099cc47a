"""emmy's version, apart from the package's __init__ so that its modules can read it without
importing the package's top (which reaches the Python API)."""

__version__ = "0.1.0"
