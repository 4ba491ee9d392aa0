"""``batch/v1`` Jobs run by the emulator's Job controller, through the unmodified ``kubernetes`` client.

Every expectation is Kubernetes 1.33's documented or coded behaviour (``job_controller.go``,
``indexed_job_utils.go``, the Job registry strategy and validation, the Jobs concept page):
"0,1" is how ``orderedIntervals.String`` writes two completed indexes, ``CompletionsReached`` the
reason of ``SuccessCriteriaMet`` and ``Complete``, and a Job deleted without a propagation policy
orphans its pods.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator
from tests.testing.kubernetes.conftest import wait_for

SUFFIX = "[bcdfghjklmnpqrstvwxz2456789]{5}"  # apimachinery's utilrand alphabet
#: A container that needs a moment to stop after SIGTERM (so a terminating pod can be seen).
SLOW_STOP = "trap 'sleep 1.5; exit 143' TERM; sleep 60 & wait"


def job_manifest(name: str, script: str, *, container: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    template_spec = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 5,
        "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", script], **(container or {})}],
        **spec.pop("template_spec", {}),
    }
    return {"metadata": {"name": name}, "spec": {"template": {"spec": template_spec}, **spec}}


def job_pods(core: client.CoreV1Api, job: str) -> list[client.V1Pod]:
    pods = core.list_namespaced_pod("default", label_selector=f"batch.kubernetes.io/job-name={job}").items
    return sorted(pods, key=lambda p: p.metadata.creation_timestamp.isoformat() + p.metadata.name)


def conditions(job: client.V1Job) -> list[tuple[str, str, str | None]]:
    return [(c.type, c.status, c.reason) for c in job.status.conditions or []]


def finished(batch: client.BatchV1Api, name: str) -> Any:
    def probe() -> client.V1Job | None:
        job = batch.read_namespaced_job(name, "default")
        return job if {"Complete", "Failed"} & {c.type for c in job.status.conditions or []} else None

    return probe


def raw_job(batch: client.BatchV1Api, name: str) -> dict[str, Any]:
    return json.loads(batch.read_namespaced_job(name, "default", _preload_content=False).data)


def log(core: client.CoreV1Api, pod: str) -> str:
    return core.read_namespaced_pod_log(pod, "default", _preload_content=False).data.decode()


def gone(batch: client.BatchV1Api, name: str) -> bool:
    try:
        batch.read_namespaced_job(name, "default")
    except client.ApiException as error:
        return error.status == 404
    return False


def test_an_indexed_job_runs_one_pod_per_index(core: client.CoreV1Api, batch: client.BatchV1Api) -> None:
    created = batch.create_namespaced_job(
        "default",
        job_manifest(
            "train", "echo $JOB_COMPLETION_INDEX $HOSTNAME", completionMode="Indexed", completions=2, parallelism=2
        ),
    )
    uid = created.metadata.uid
    spec = created.spec  # SetDefaults_Job and the generated selector
    assert (spec.backoff_limit, spec.completion_mode, spec.suspend, spec.manual_selector) == (
        6,
        "Indexed",
        False,
        False,
    )
    assert spec.pod_replacement_policy == "TerminatingOrFailed"
    assert spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": uid}
    generated = {
        "batch.kubernetes.io/controller-uid": uid, "controller-uid": uid,
        "batch.kubernetes.io/job-name": "train", "job-name": "train",
    }  # fmt: skip
    assert spec.template.metadata.labels == generated
    assert created.metadata.labels == generated

    job = wait_for(finished(batch, "train"))
    assert conditions(job) == [
        ("SuccessCriteriaMet", "True", "CompletionsReached"),
        ("Complete", "True", "CompletionsReached"),
    ]
    assert {c.message for c in job.status.conditions} == {"Reached expected number of succeeded pods"}
    status = raw_job(batch, "train")["status"]
    assert status["completedIndexes"] == "0,1"  # orderedIntervals.String: "0-1" only from three on
    assert (status["succeeded"], status["ready"], status["terminating"]) == (2, 0, 0)
    assert "active" not in status and "failed" not in status and status["uncountedTerminatedPods"] == {}
    assert status["completionTime"] == job.status.conditions[1].last_transition_time.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert job.status.completion_time >= job.status.start_time

    pods = job_pods(core, "train")
    indexes = sorted(p.metadata.annotations["batch.kubernetes.io/job-completion-index"] for p in pods)
    assert indexes == ["0", "1"]  # one pod per index
    for pod in pods:
        index = pod.metadata.annotations["batch.kubernetes.io/job-completion-index"]
        assert re.fullmatch(f"train-{index}-{SUFFIX}", pod.metadata.name)
        assert pod.metadata.labels == {**generated, "batch.kubernetes.io/job-completion-index": index}
        assert pod.spec.hostname == f"train-{index}"
        [owner] = pod.metadata.owner_references
        assert (owner.api_version, owner.kind, owner.name, owner.uid) == ("batch/v1", "Job", "train", uid)
        assert owner.controller is True and owner.block_owner_deletion is True
        [env] = pod.spec.containers[0].env
        assert env.name == "JOB_COMPLETION_INDEX" and env.value_from.field_ref.field_path == (
            "metadata.labels['batch.kubernetes.io/job-completion-index']"
        )
        assert pod.status.phase == "Succeeded" and not pod.metadata.finalizers  # counted, finalizer removed
        assert log(core, pod.metadata.name) == f"{index} train-{index}\n"
    events = core.list_namespaced_event("default", field_selector="involvedObject.name=train").items
    reasons = sorted((e.reason, e.message) for e in events)
    assert reasons == sorted(
        [("Completed", "Job completed")] + [("SuccessfulCreate", f"Created pod: {p.metadata.name}") for p in pods]
    )


def test_a_non_indexed_job_counts_completions(core: client.CoreV1Api, batch: client.BatchV1Api) -> None:
    batch.create_namespaced_job("default", job_manifest("batch3", "echo $HOSTNAME", completions=3, parallelism=2))
    job = wait_for(finished(batch, "batch3"))
    assert job.status.succeeded == 3 and job.status.completed_indexes is None
    assert conditions(job)[-1] == ("Complete", "True", "CompletionsReached")
    pods = job_pods(core, "batch3")
    assert len(pods) == 3
    for pod in pods:
        assert re.fullmatch(f"batch3-{SUFFIX}", pod.metadata.name)
        assert pod.spec.hostname is None and pod.spec.containers[0].env is None
        assert log(core, pod.metadata.name) == f"{pod.metadata.name}\n"  # HOSTNAME is the pod name


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"template_spec": {"restartPolicy": "Always"}}, "spec.template.spec.restartPolicy",
         'Required value: valid values: "OnFailure", "Never"'),
        ({"template_spec": {"restartPolicy": None}}, "spec.template.spec.restartPolicy",
         'Required value: valid values: "OnFailure", "Never"'),
        # (with neither completions nor parallelism, both default to 1: parallelism alone leaves it unset)
        ({"completionMode": "Indexed", "parallelism": 2}, "spec.completions",
         "Required value: when completion mode is Indexed"),
        ({"completionMode": "Parallel"}, "spec.completionMode",
         'Unsupported value: "Parallel": supported values: "NonIndexed", "Indexed"'),
        ({"backoffLimit": -1}, "spec.backoffLimit", "Invalid value: -1: must be greater than or equal to 0"),
        ({"template_spec": {"restartPolicy": "OnFailure"},
          "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}},
         "spec.template.spec.restartPolicy",
         'Invalid value: "OnFailure": only "Never" is supported when podFailurePolicy is specified'),
        ({"podFailurePolicy": {"rules": [{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [1]}}]}},
         "spec.podFailurePolicy.rules[0].action",
         'Invalid value: "FailIndex": requires the backoffLimitPerIndex to be set'),
        ({"podFailurePolicy": {"rules": [{"action": "Ignore"}]}}, "spec.podFailurePolicy.rules[0]",
         "Invalid value: specifying one of OnExitCodes and OnPodConditions is required"),
        ({"selector": {"matchLabels": {"app": "x"}}}, "spec.selector", "`selector` not auto-generated"),
    ],
)  # fmt: skip
def test_the_api_server_refuses_what_a_cluster_refuses(
    batch: client.BatchV1Api, change: dict[str, Any], field: str, message: str
) -> None:
    manifest = job_manifest("bad", "true", template_spec=change.pop("template_spec", {}), **change)
    if manifest["spec"]["template"]["spec"].get("restartPolicy") is None:
        del manifest["spec"]["template"]["spec"]["restartPolicy"]
    with pytest.raises(client.ApiException) as refused:
        batch.create_namespaced_job("default", manifest)
    body = json.loads(refused.value.body)
    assert (refused.value.status, body["reason"]) == (422, "Invalid")
    assert body["message"].startswith('Job.batch "bad" is invalid: ')
    assert (body["details"]["kind"], body["details"]["group"]) == ("Job", "batch")
    assert any(c["field"] == field and message in c["message"] for c in body["details"]["causes"]), body


def test_failed_pods_are_retried_up_to_the_backoff_limit(core: client.CoreV1Api, batch: client.BatchV1Api) -> None:
    """Index 1 fails twice (backoffLimit 1): the Job fails; the pod still running for index 0 is
    deleted, and the terminal ``Failed`` condition waits until it is gone (``FailureTarget`` first)."""
    script = f'if [ "$JOB_COMPLETION_INDEX" = 1 ]; then exit 3; fi; {SLOW_STOP}'
    batch.create_namespaced_job(
        "default", job_manifest("flaky", script, completionMode="Indexed", completions=2, parallelism=2, backoffLimit=1)
    )

    def failing_but_not_failed() -> client.V1Job | None:
        job = batch.read_namespaced_job("flaky", "default")
        types = [c.type for c in job.status.conditions or []]
        return job if types == ["FailureTarget"] and job.status.terminating == 1 else None

    target = wait_for(failing_but_not_failed)
    [(reason, message)] = [(c.reason, c.message) for c in target.status.conditions]
    assert (reason, message) == ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
    assert target.status.active is None
    job = wait_for(finished(batch, "flaky"))
    assert conditions(job) == [
        ("FailureTarget", "True", "BackoffLimitExceeded"),
        ("Failed", "True", "BackoffLimitExceeded"),
    ]
    assert job.status.conditions[1].message == "Job has reached the specified backoff limit"
    assert job.status.completion_time is None and job.status.terminating == 0
    assert job.status.failed == 3  # two failures of index 1 and the deleted pod of index 0
    pods = job_pods(core, "flaky")
    failed = [p for p in pods if p.metadata.labels["batch.kubernetes.io/job-completion-index"] == "1"]
    assert [p.status.phase for p in failed] == ["Failed", "Failed"]
    assert [p.status.container_statuses[0].state.terminated.exit_code for p in failed] == [3, 3]
    assert not [p for p in pods if p.metadata.labels["batch.kubernetes.io/job-completion-index"] == "0"]
    warnings = core.list_namespaced_event("default", field_selector="involvedObject.name=flaky,type=Warning").items
    assert [(e.reason, e.message) for e in warnings] == [
        ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
    ]


@pytest.mark.parametrize("ignore_disruptions", [True, False])
def test_a_pod_failure_policy_does_not_count_spot_preemptions(
    core: client.CoreV1Api,
    batch: client.BatchV1Api,
    kubernetes_emulator: KubernetesEmulator,
    tmp_path: Path,
    ignore_disruptions: bool,
) -> None:
    """The first pod is preempted (DisruptionTarget); its replacement succeeds. With backoffLimit 0
    the preemption fails the Job unless a rule ignores DisruptionTarget."""
    marker = tmp_path / "ran-once"
    script = f"if [ -e {marker} ]; then exit 0; fi; touch {marker}; sleep 60"
    extra: dict[str, Any] = {"backoffLimit": 0}
    if ignore_disruptions:
        extra["podFailurePolicy"] = {
            "rules": [
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
                {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}},
            ]
        }
    created = batch.create_namespaced_job("default", job_manifest("spot", script, **extra))
    expected_policy = "Failed" if ignore_disruptions else "TerminatingOrFailed"  # defaulted from podFailurePolicy
    assert created.spec.pod_replacement_policy == expected_policy
    first = wait_for(lambda: [p for p in job_pods(core, "spot") if p.status.phase == "Running"])[0]
    wait_for(lambda: marker.exists())
    kubernetes_emulator.preempt(first.metadata.name)
    job = wait_for(finished(batch, "spot"))
    if ignore_disruptions:
        assert conditions(job)[-1] == ("Complete", "True", "CompletionsReached")
        assert (job.status.succeeded, job.status.failed) == (1, None)
        assert len(job_pods(core, "spot")) == 2
    else:
        assert conditions(job)[-1] == ("Failed", "True", "BackoffLimitExceeded")
        assert job.status.failed == 1
    preempted = core.read_namespaced_pod(first.metadata.name, "default")
    assert any(c.type == "DisruptionTarget" for c in preempted.status.conditions)


def test_a_backoff_limit_per_index(core: client.CoreV1Api, batch: client.BatchV1Api) -> None:
    """Index 1 fails twice (its limit is 1), index 2 once on a FailIndex rule, index 0 succeeds:
    two failed indexes, and the Job fails once every index is done ("Job has failed indexes")."""
    script = 'case "$JOB_COMPLETION_INDEX" in 0) exit 0;; 1) exit 1;; *) exit 5;; esac'
    policy = {"rules": [{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [5]}}]}
    created = batch.create_namespaced_job(
        "default",
        job_manifest(
            "per-index", script, completionMode="Indexed", completions=3, parallelism=3,
            backoffLimitPerIndex=1, podFailurePolicy=policy,
        ),
    )  # fmt: skip
    assert created.spec.backoff_limit == 2**31 - 1  # the default with a per-index limit
    job = wait_for(finished(batch, "per-index"))
    assert [(c.type, c.reason, c.message) for c in job.status.conditions] == [
        ("FailureTarget", "FailedIndexes", "Job has failed indexes"),
        ("Failed", "FailedIndexes", "Job has failed indexes"),
    ]
    assert (job.status.completed_indexes, job.status.failed_indexes) == ("0", "1,2")
    assert (job.status.succeeded, job.status.failed) == (1, 3)
    counts = sorted(
        (p.metadata.labels["batch.kubernetes.io/job-completion-index"],
         p.metadata.annotations["batch.kubernetes.io/job-index-failure-count"])
        for p in job_pods(core, "per-index")
    )  # fmt: skip
    assert counts == [("0", "0"), ("1", "0"), ("1", "1"), ("2", "0")]  # index 2 was not retried


def test_a_success_policy_ends_the_job_early(core: client.CoreV1Api, batch: client.BatchV1Api) -> None:
    """Index 0 (the leader) succeeding is enough: the lingering pods are deleted, not counted as
    failed, and ``Complete`` follows ``SuccessCriteriaMet`` once they are gone."""
    script = f'if [ "$JOB_COMPLETION_INDEX" = 0 ]; then exit 0; fi; {SLOW_STOP}'
    policy = {"rules": [{"succeededIndexes": "0"}]}
    batch.create_namespaced_job(
        "default",
        job_manifest("leader", script, completionMode="Indexed", completions=3, parallelism=3, successPolicy=policy),
    )
    job = wait_for(finished(batch, "leader"))
    assert [(c.type, c.reason, c.message) for c in job.status.conditions] == [
        ("SuccessCriteriaMet", "SuccessPolicy", "Matched rules at index 0"),
        ("Complete", "SuccessPolicy", "Matched rules at index 0"),
    ]
    assert (job.status.completed_indexes, job.status.succeeded, job.status.failed) == ("0", 1, None)
    assert [p.spec.hostname for p in job_pods(core, "leader")] == ["leader-0"]  # the others are gone


def test_fail_job_on_an_exit_code(core: client.CoreV1Api, batch: client.BatchV1Api) -> None:
    policy = {"rules": [{"action": "FailJob", "onExitCodes": {"containerName": "c", "operator": "In", "values": [42]}}]}
    batch.create_namespaced_job("default", job_manifest("fatal", "exit 42", podFailurePolicy=policy))
    job = wait_for(finished(batch, "fatal"))
    [pod] = job_pods(core, "fatal")
    message = (
        f"Container c for pod default/{pod.metadata.name} failed with exit code 42 matching FailJob rule at index 0"
    )
    assert [(c.type, c.reason, c.message) for c in job.status.conditions] == [
        ("FailureTarget", "PodFailurePolicy", message),
        ("Failed", "PodFailurePolicy", message),
    ]


def test_a_pod_deleted_while_its_job_runs_is_counted_and_replaced(
    core: client.CoreV1Api, batch: client.BatchV1Api, kubernetes_emulator: KubernetesEmulator
) -> None:
    batch.create_namespaced_job(
        "default", job_manifest("keep", "sleep 60", completionMode="Indexed", completions=1, parallelism=1)
    )
    first = wait_for(lambda: [p for p in job_pods(core, "keep") if p.status.phase == "Running"])[0]
    assert first.metadata.finalizers == ["batch.kubernetes.io/job-tracking"]
    kubernetes_emulator.delete_by_person(first.metadata.name)
    replacement = wait_for(lambda: [p for p in job_pods(core, "keep") if p.metadata.name != first.metadata.name])[0]
    assert replacement.metadata.labels["batch.kubernetes.io/job-completion-index"] == "0"
    assert replacement.spec.hostname == "keep-0"
    job = wait_for(lambda: (j := batch.read_namespaced_job("keep", "default")).status.failed == 1 and j)
    assert not job.status.conditions  # one failure of the default six


def test_delete_without_a_policy_orphans_the_pods(core: client.CoreV1Api, batch: client.BatchV1Api) -> None:
    """batch/v1's default is Orphan (``DefaultGarbageCollectionPolicy``): the pods keep running."""
    batch.create_namespaced_job("default", job_manifest("orphans", "sleep 60", completions=2, parallelism=2))
    wait_for(lambda: len([p for p in job_pods(core, "orphans") if p.status.phase == "Running"]) == 2)
    answer = json.loads(batch.delete_namespaced_job("orphans", "default", _preload_content=False).data)
    assert answer["kind"] == "Job" and answer["metadata"]["finalizers"] == ["orphan"]
    assert answer["metadata"]["deletionTimestamp"] and answer["metadata"]["deletionGracePeriodSeconds"] == 0
    wait_for(lambda: gone(batch, "orphans"))
    pods = wait_for(lambda: [p for p in job_pods(core, "orphans") if not p.metadata.finalizers])
    assert len(pods) == 2
    for pod in pods:
        assert pod.status.phase == "Running" and pod.metadata.owner_references is None
        assert pod.metadata.deletion_timestamp is None


def test_background_deletion_deletes_the_pods_after_the_job(core: client.CoreV1Api, batch: client.BatchV1Api) -> None:
    batch.create_namespaced_job("default", job_manifest("bg", SLOW_STOP, completions=2, parallelism=2))
    wait_for(lambda: len([p for p in job_pods(core, "bg") if p.status.phase == "Running"]) == 2)
    uid = batch.read_namespaced_job("bg", "default").metadata.uid
    response = batch.delete_namespaced_job("bg", "default", propagation_policy="Background", _preload_content=False)
    answer = json.loads(response.data)
    assert answer == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
        "details": {"name": "bg", "group": "batch", "kind": "jobs", "uid": uid},
    }  # fmt: skip
    assert gone(batch, "bg")  # at once; the garbage collector deletes the pods gracefully after
    deleting = wait_for(lambda: [p for p in job_pods(core, "bg") if p.metadata.deletion_timestamp])
    assert deleting[0].metadata.deletion_grace_period_seconds == 5
    wait_for(lambda: not job_pods(core, "bg"))


def test_foreground_deletion_keeps_the_job_until_its_pods_are_gone(
    core: client.CoreV1Api, batch: client.BatchV1Api
) -> None:
    batch.create_namespaced_job("default", job_manifest("fg", SLOW_STOP, completions=2, parallelism=2))
    wait_for(lambda: len([p for p in job_pods(core, "fg") if p.status.phase == "Running"]) == 2)
    options = client.V1DeleteOptions(propagation_policy="Foreground")  # in the body this time
    answer = json.loads(batch.delete_namespaced_job("fg", "default", body=options, _preload_content=False).data)
    assert answer["metadata"]["finalizers"] == ["foregroundDeletion"] and answer["metadata"]["deletionTimestamp"]
    with pytest.raises(client.ApiException) as taken:  # the name is held until then, and the registry says why
        batch.create_namespaced_job("default", job_manifest("fg", "true"))
    status = json.loads(taken.value.body)
    assert (status["code"], status["reason"]) == (409, "AlreadyExists")
    assert status["message"] == 'object is being deleted: jobs.batch "fg" already exists'
    seen: list[int] = []  # how many pods were left each time the Job was still there

    def job_gone() -> bool:
        try:
            job = batch.read_namespaced_job("fg", "default")
        except client.ApiException as error:
            return error.status == 404
        pods = job_pods(core, "fg")
        assert job.metadata.deletion_timestamp is not None and all(p.metadata.deletion_timestamp for p in pods)
        seen.append(len(pods))
        return False

    wait_for(job_gone)
    assert seen and seen[0] == 2  # the Job waited for its (terminating) pods ...
    assert not job_pods(core, "fg")  # ... and went only once they had


def test_delete_options_are_validated(batch: client.BatchV1Api) -> None:
    batch.create_namespaced_job("default", job_manifest("opts", "true"))
    with pytest.raises(client.ApiException) as refused:
        batch.delete_namespaced_job("opts", "default", propagation_policy="Later")
    body = json.loads(refused.value.body)
    assert refused.value.status == 422
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueNotSupported",
            "field": "propagationPolicy",
            "message": 'Unsupported value: "Later": supported values: "Foreground", "Background", "Orphan", "nil"',
        }
    ]
    with pytest.raises(client.ApiException) as stale:
        batch.delete_namespaced_job("opts", "default", body=client.V1DeleteOptions(preconditions={"uid": "other"}))
    assert stale.value.status == 409


def test_suspend_resume_and_the_status_subresource(core: client.CoreV1Api, batch: client.BatchV1Api) -> None:
    created = batch.create_namespaced_job("default", job_manifest("later", "true", suspend=True))
    job = wait_for(lambda: (j := batch.read_namespaced_job("later", "default")).status.conditions and j)
    assert conditions(job) == [("Suspended", "True", "JobSuspended")]
    assert job.status.start_time is None and not job_pods(core, "later")
    assert batch.read_namespaced_job_status("later", "default").metadata.uid == created.metadata.uid
    batch.patch_namespaced_job("later", "default", {"spec": {"suspend": False}})
    job = wait_for(finished(batch, "later"))
    assert conditions(job)[0] == ("Suspended", "False", "JobResumed")
    assert conditions(job)[-1] == ("Complete", "True", "CompletionsReached")
    with pytest.raises(client.ApiException) as immutable:
        batch.patch_namespaced_job("later", "default", {"spec": {"completions": 3}})
    assert immutable.value.status == 422 and "spec.completions" in immutable.value.body


def test_active_deadline_and_ttl(core: client.CoreV1Api, batch: client.BatchV1Api) -> None:
    batch.create_namespaced_job(
        "default", job_manifest("slow", "sleep 60", activeDeadlineSeconds=1, ttlSecondsAfterFinished=1)
    )
    job = wait_for(finished(batch, "slow"))
    assert conditions(job) == [
        ("FailureTarget", "True", "DeadlineExceeded"),
        ("Failed", "True", "DeadlineExceeded"),
    ]
    assert job.status.conditions[1].message == "Job was active longer than specified deadline"
    wait_for(lambda: gone(batch, "slow") and not job_pods(core, "slow"))  # the TTL controller, in the foreground


def test_an_unschedulable_pod_of_a_deleted_job_goes_too(core: client.CoreV1Api, batch: client.BatchV1Api) -> None:
    """A pod never bound has nothing to stop: background deletion removes it once the finalizer goes."""
    manifest = job_manifest("nowhere", "true", template_spec={"nodeSelector": {"pool": "none"}})
    batch.create_namespaced_job("default", manifest)
    wait_for(lambda: job_pods(core, "nowhere"))
    batch.delete_namespaced_job("nowhere", "default", propagation_policy="Background")
    wait_for(lambda: not job_pods(core, "nowhere"))


def test_python_exits_report_their_code(core: client.CoreV1Api, batch: client.BatchV1Api) -> None:
    """The container's own exit code reaches the pod status the failure policy reads."""
    manifest = job_manifest("py", "true", backoffLimit=0)
    manifest["spec"]["template"]["spec"]["containers"][0]["command"] = [sys.executable, "-c", "raise SystemExit(7)"]
    batch.create_namespaced_job("default", manifest)
    wait_for(finished(batch, "py"))
    [pod] = job_pods(core, "py")
    assert pod.status.container_statuses[0].state.terminated.exit_code == 7


def test_a_service_given_an_owner_that_is_gone_is_collected_as_one_created_so(
    core: client.CoreV1Api, batch: client.BatchV1Api
) -> None:
    """The garbage collector looks up an owner added by an update as one given at creation (its graph builder
    makes an owner it has not seen a virtual node, verifies it, and deletes the dependents of one that does not
    exist): a training's Service patched with its Job as owner after the Job was deleted goes too."""
    batch.create_namespaced_job("default", job_manifest("short", "print('done')"))
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "short",
             "uid": batch.read_namespaced_job("short", "default").metadata.uid}  # fmt: skip
    batch.delete_namespaced_job("short", "default", propagation_policy="Foreground")
    wait_for(lambda: gone(batch, "short"), 60)
    for name, metadata in (("patched", {}), ("created", {"ownerReferences": [owner]})):
        body = {"metadata": {"name": name, **metadata}, "spec": {"clusterIP": "None", "ports": [{"port": 29500}]}}
        core.create_namespaced_service("default", body)
    core.patch_namespaced_service("patched", "default", {"metadata": {"ownerReferences": [owner]}})
    names = lambda: {s.metadata.name for s in core.list_namespaced_service("default").items}  # noqa: E731
    wait_for(lambda: not names() & {"patched", "created"}, 30)
