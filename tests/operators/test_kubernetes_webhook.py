"""GPU tasks whose pods a validating admission webhook denies (issue 25, behaviour 1: the policy webhook).

A policy engine's webhook answers with its own ``status.code``: 403 most often, 400 or 422 as well; the API
server keeps that code and words the denial ``pods "x" is forbidden: admission webhook "<name>" denied the
request: <message>`` (``webhook/errors/statuserror.go``, ``ToStatusErr``); a Job's ranks so denied show it in
``FailedCreate``. Whatever the code, the task fails in one line quoting the webhook's message and naming the
webhook, not a preemption and no spot budget spent: a denial with 422 is not the pod spec's validation error,
and a 400 not a client bug.
"""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred

from airflow_gpu.spot import admission
from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from airflow_gpu.testing.polling import wait_for
from airflow_gpu.utils.results import INTERRUPTIONS_XCOM_KEY
from tests.operators.test_kubernetes_pod_security import context, pod_operator, pods, training
from tests.operators.test_training_job_runs import context as training_context
from tests.operators.test_training_job_runs import jobs

pytestmark = pytest.mark.usefixtures("fast_api_backoff")

WEBHOOK = "gpu-policy.example.com"
DENIED = f'admission webhook "{WEBHOOK}" denied the request: GPU pods need label team'


def assert_denied_in_one_line(message: str) -> None:
    assert "\n" not in message and "HTTP response headers" not in message, message
    assert DENIED in message
    assert f'meet the policy of admission webhook "{WEBHOOK}"' in message
    assert "kubectl get validatingwebhookconfigurations" in message
    assert "not a preemption" in message and "no spot budget spent" in message


@pytest.mark.parametrize("code", [403, 400, 422])
@pytest.mark.parametrize("deferrable", [False, True])
def test_a_pod_a_webhook_denies_fails_in_one_line_quoting_it_whatever_its_code(
    kubernetes_emulator: KubernetesEmulator, deferrable: bool, code: int
) -> None:
    kubernetes_emulator.deny_pods(WEBHOOK, "GPU pods need label team", code)
    ctx = context()
    with pytest.raises(AirflowException) as raised:
        pod_operator(kubernetes_emulator, "default", capacity="spot", deferrable=deferrable).execute(ctx)
    assert not isinstance(raised.value, (AirflowFailException, TaskDeferred))
    message = str(raised.value)
    assert_denied_in_one_line(message)
    assert "the API server refused to create the pod in namespace default: pods " in message
    assert ctx["ti"].xcom[INTERRUPTIONS_XCOM_KEY] == []
    assert pods(kubernetes_emulator, "default") == []


def test_a_pod_the_webhook_does_not_match_runs(kubernetes_emulator: KubernetesEmulator) -> None:
    kubernetes_emulator.deny_pods(WEBHOOK, "GPU pods need label team", selector="!team")
    pod_operator(kubernetes_emulator, "default", labels={"team": "ml"}).execute(context())


@pytest.mark.parametrize(
    ("status", "message", "refused"),
    [
        (422, f'pods "x" is forbidden: {DENIED}', True),
        (400, f'pods "x" is forbidden: {DENIED}', True),
        (403, 'pods "x" is forbidden: exceeded quota: gpus', True),
        (422, 'Pod "x" is invalid: spec.containers[0].image: Required value', False),  # the spec's fault
        (400, "the server rejected our request for an unknown reason", False),
        (500, f"Internal error occurred: {DENIED}", False),  # retried as a server error, not read as a refusal
        (500, 'Internal error occurred: failed calling webhook "gpu-policy.example.com": timeout', False),
    ],
)
def test_which_create_errors_are_admission_refusals(status: int, message: str, refused: bool) -> None:
    assert admission.refused(status, message) is refused


@pytest.mark.slow
@pytest.mark.parametrize("code", [403, 422])
def test_a_training_whose_ranks_a_webhook_denies_fails_with_its_message(
    kubernetes_default_connection: KubernetesEmulator, code: int
) -> None:
    emulator = kubernetes_default_connection
    emulator.deny_pods(WEBHOOK, "GPU pods need label team", code)
    ctx = training_context()
    with pytest.raises(AirflowException) as raised:
        training("default", startup_timeout_seconds=2).execute(ctx)  # type: ignore[arg-type]
    message = str(raised.value)
    assert " of 2 machines of Job " in message and "Error creating: pods " in message
    assert_denied_in_one_line(message)
    assert ctx["ti"].xcom[INTERRUPTIONS_XCOM_KEY] == []
    assert wait_for(lambda: jobs(emulator) == [] or None, 60, "the Job to go")
