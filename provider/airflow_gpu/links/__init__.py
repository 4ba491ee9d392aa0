"""Operator extra links: buttons on a task instance's page, built on the worker when the task ends."""
