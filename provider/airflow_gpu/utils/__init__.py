"""Glue between the pure core and the backends' client libraries."""
