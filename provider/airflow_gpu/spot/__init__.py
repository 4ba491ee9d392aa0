"""Spot capacity: tell a preemption from a bug, and decide what to do next. Pure: no Airflow, no SDKs."""
