"""The production soak (``make soak``, issue 26): the provider's promises under seeded faults on the
shape users run, PostgreSQL, CeleryExecutor on Redis, two Celery workers and two triggerers.

``stack`` starts it all with the emulators; ``soak_dags`` is the DAG file it runs (a mapped GPU
fan-out with a reduce on Kubernetes, a Batch training; deferrable and not); ``faults`` draws and
injects the seeded faults; ``observer`` keeps the history of every pod and job; ``invariants``
judges that history with Airflow's; ``report`` writes it as text and HTML; ``runner`` is the
command line (``python -m airflow_gpu.testing.soak --seed N``).
"""
