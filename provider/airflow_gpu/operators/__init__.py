"""Operators, one module per backend."""
