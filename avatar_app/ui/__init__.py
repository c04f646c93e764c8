"""PySide6 user interface (the only package that imports Qt widgets)."""
