"""GPU profiling: samples of each GPU over a task's run, and what they add up to. Pure: no Airflow, no SDK."""
