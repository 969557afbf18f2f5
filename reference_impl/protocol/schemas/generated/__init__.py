"""Generated message classes (see ../codegen.py)."""
