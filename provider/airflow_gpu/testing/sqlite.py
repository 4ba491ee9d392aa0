"""SQLite connection arguments for the local Airflow stack (``[database] sql_alchemy_connect_args``).

pysqlite waits 5 s for a lock before answering "database is locked". On a two-core machine the
scheduler, the dag-processor, the triggerer, the API server and every task process write to one
file; a writer can hold it longer than that while the machine is busy, and the scheduler's loop
exits on the error. A minute of patience is what a loaded machine needs; the write-ahead log
(``AirflowStack._use_write_ahead_log``) already keeps readers from blocking. Production runs
PostgreSQL (issue: the soak) and is unaffected. Kept in a module of its own: every Airflow process
imports it at start.
"""

CONNECT_ARGS: dict[str, object] = {"timeout": 60}
