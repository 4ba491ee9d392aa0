"""Imported by every part of the end-to-end stack at start (Airflow reads ``airflow_local_settings``
from ``$AIRFLOW_HOME/config``): the modules every scenario DAG file imports, loaded once.

It changes no Airflow behaviour. The LocalExecutor forks its workers from the scheduler, and each
worker forks the process that parses the DAG file and runs the task, so what the scheduler has
imported, every task inherits. Without it each of the suite's ~150 task processes imported the
Kubernetes clients, boto3 and the operators again (1 to 3 s of CPU each, most of the end-to-end
run's CPU on a 2-core machine). A deployment with LocalExecutor or Celery's prefork pool can do the
same (docs/testing.rst).
"""

from __future__ import annotations

import airflow.providers.amazon.aws.operators.batch
import airflow.providers.cncf.kubernetes.operators.pod  # noqa: F401

import airflow_gpu.operators.accelerate
import airflow_gpu.operators.batch
import airflow_gpu.operators.kubernetes  # noqa: F401
