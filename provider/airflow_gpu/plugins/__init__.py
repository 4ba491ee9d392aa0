"""The GPU profile report in the Airflow UI: a FastAPI app under ``/gpu-profile`` and its tabs.

Only ``plugin`` is imported by every Airflow process that loads plugins (scheduler, workers,
DAG processor); it stays cheap and never touches the database. ``app`` (routes, auth, XCom
reading) is imported by the API server on the first request to ``/gpu-profile``.
"""
