"""``airflow-gpu reap``: the GPU work this provider started whose task try is no longer running.

A worker lost for good, a triggerer killed mid-cleanup, a task marked failed from the UI while a
deletion failed: the pod, training Job or Batch job runs on, billed, with nobody to follow it.
The reaper finds them by the marks the provider puts on everything it creates (``resources``),
asks Airflow about each one's task instance (``airflow_api``), decides with one pure rule
(``rules``), and deletes what that rule calls an orphan the way the operators' own cleanup does
(``kubernetes``, ``batch``); ``reaper`` ties them together for the command line.
"""
