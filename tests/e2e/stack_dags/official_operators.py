"""The official KubernetesPodOperator and BatchOperator, unmodified, each against its own emulator,
run on the shared stack by tests/e2e/test_kpo_on_emulator.py and tests/e2e/test_batch_on_emulator.py.

KPO DAGs use the connection ``k8s_<dag_id>``, Batch DAGs ``aws_<dag_id>``; the tests create them
and, for Batch, register the job definition ``gpu-smoke`` first.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.providers.amazon.aws.hooks.batch_client import BatchClientHook
from airflow.providers.amazon.aws.operators.batch import BatchOperator
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk import DAG

# The hook sleeps 1..10 s between polls by default; its docstring suggests this for tests.
BatchClientHook.DEFAULT_DELAY_MIN, BatchClientHook.DEFAULT_DELAY_MAX = 0, 1
# With GATE set, the workload waits (up to 5 min) for that file, which the deferrable scenarios' test
# creates once the deferral is over (ReleaseAfterDeferral in tests/e2e/scenarios.py says why).
WAIT_FOR_GATE = 'n=0; while [ -n "$GATE" ] && [ ! -e "$GATE" ] && [ $n -lt 1500 ]; do sleep 0.2; n=$((n+1)); done;'
SMOKE = f"echo line-one on $AWS_BATCH_CE_NAME; {WAIT_FOR_GATE} sleep 1; echo line-two; exit $BATCH_EXIT"
START = pendulum.datetime(2026, 1, 1, tz="UTC")

for suffix, exit_code, deferrable in (("", 0, False), ("_exit3", 3, False), ("_deferrable", 0, True)):
    with DAG(f"kpo_on_emulator{suffix}", schedule=None, start_date=START, catchup=False, tags=["e2e-scenario"]):
        KubernetesPodOperator(
            task_id="hello",
            name="hello",
            namespace="default",
            image="busybox",
            cmds=["sh", "-c", f"echo line-one; {WAIT_FOR_GATE} sleep 1; echo line-two; exit ${{EXIT_CODE:-0}}"],
            env_vars={
                "EXIT_CODE": str(exit_code),
                # the test releases the pod once the deferral is over (tests/e2e/scenarios.py)
                "GATE": "{{ dag_run.conf['workdir'] }}/released" if deferrable else "",
            },
            kubernetes_conn_id=f"k8s_kpo_on_emulator{suffix}",
            get_logs=True,
            deferrable=deferrable,
            poll_interval=1,
            on_finish_action="keep_pod",
        )
    with DAG(f"batch_on_emulator{suffix}", schedule=None, start_date=START, catchup=False, tags=["e2e-scenario"]):
        BatchOperator(
            task_id="smoke",
            job_name="smoke",
            job_queue="gpu-spot",
            job_definition="gpu-smoke",
            container_overrides={
                "command": ["sh", "-c", SMOKE],
                "environment": [
                    {"name": "BATCH_EXIT", "value": str(exit_code)},
                    # the test releases the job once the task is deferred (test_batch_on_emulator.py)
                    {"name": "GATE", "value": "{{ dag_run.conf['workdir'] }}/released" if deferrable else ""},
                ],
            },
            aws_conn_id=f"aws_batch_on_emulator{suffix}",
            awslogs_enabled=True,
            awslogs_fetch_interval=timedelta(seconds=1),
            deferrable=deferrable,
            poll_interval=1,
        )
