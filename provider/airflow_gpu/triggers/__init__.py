"""Triggers: waiting in the triggerer, shared between tasks where the API allows it."""
