"""Hooks: the cloud API calls of the provider, one module per backend."""
