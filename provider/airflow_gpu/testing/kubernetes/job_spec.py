"""What the API server does to a ``batch/v1`` Job before storing it: defaults, the generated
selector and labels, and validation, with Kubernetes 1.33's messages.

Sources: ``pkg/apis/batch/v1/defaults.go`` (``SetDefaults_Job``), ``pkg/registry/batch/job/strategy.go``
(``generateSelector``, ``PrepareForCreate``) and ``pkg/apis/batch/validation/validation.go``
(``ValidateJob``, ``validateJobSpec``, ``validatePodFailurePolicy``, ``ValidateJobSpecUpdate``).
The pod template gets the pod defaults first (``restartPolicy: Always`` when unset), which is why a
template without a restart policy is refused as "Required value".
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

from airflow_gpu.testing.kubernetes.objects import (
    dns_label_causes,
    duplicate,
    invalid,
    invalid_omitted,
    invalid_value,
    non_negative,
    not_supported,
    required,
    validate_metadata,
    validate_pod_spec,
)
from airflow_gpu.testing.kubernetes.selectors import selector_matches

Obj = dict[str, Any]
Cause = dict[str, str]

CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
LEGACY_CONTROLLER_UID_LABEL = "controller-uid"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
LEGACY_JOB_NAME_LABEL = "job-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
MAX_PARALLELISM_INDEXED = 100_000
ACTIONS = ["Count", "FailIndex", "FailJob", "Ignore"]
OPERATORS = ["In", "NotIn"]
CONDITION_STATUSES = ["False", "True", "Unknown"]
REPLACEMENT_POLICIES = ["Failed", "TerminatingOrFailed"]
COMPLETION_MODES = ["NonIndexed", "Indexed"]
MAX_INT32 = 2**31 - 1


def default_pod_spec(spec: Obj) -> None:
    """``SetDefaults_PodSpec`` and the container defaults a pod template gets."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    for kind in ("initContainers", "containers"):
        for container in spec.get(kind) or []:
            if isinstance(container, dict):
                container.setdefault("terminationMessagePath", "/dev/termination-log")
                container.setdefault("terminationMessagePolicy", "File")
                image = str(container.get("image") or "")
                tag = image.rsplit("/", 1)[-1]
                latest = "@" not in image and (":" not in tag or tag.endswith(":latest"))
                container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
                container.setdefault("resources", {})


def default_job(job: Obj) -> None:
    """``SetDefaults_Job``, then ``PrepareForCreate``'s generated selector and labels (needs the uid)."""
    spec = job.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = spec["parallelism"] = 1
    spec.setdefault("parallelism", 1)
    if spec.get("backoffLimit") is None:
        spec["backoffLimit"] = MAX_INT32 if spec.get("backoffLimitPerIndex") is not None else 6
    # The template is a struct, not a pointer: a Job without one gets an empty one, defaulted,
    # which validation then refuses field by field (containers, restart policy).
    template = spec.setdefault("template", {})
    if isinstance(template, dict):
        template.setdefault("metadata", {})
        if isinstance(template.setdefault("spec", {}), dict):
            default_pod_spec(template["spec"])
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    policy = spec.get("podFailurePolicy")
    if isinstance(policy, dict):
        for rule in policy.get("rules") or []:
            for pattern in (rule.get("onPodConditions") or []) if isinstance(rule, dict) else []:
                if isinstance(pattern, dict):
                    pattern.setdefault("status", "True")
    spec.setdefault("podReplacementPolicy", "Failed" if policy is not None else "TerminatingOrFailed")
    spec.setdefault("manualSelector", False)
    if spec["manualSelector"] is not True and isinstance(template, dict):
        _generate_selector(job)
    # SetDefaults_Job copies the template's labels to a Job without labels; it runs again when the
    # stored Job is read, after the selector labels were generated, so clients see those too.
    labels = (template.get("metadata") or {}).get("labels") if isinstance(template, dict) else None
    if isinstance(labels, dict) and labels and not job["metadata"].get("labels"):
        job["metadata"]["labels"] = copy.deepcopy(labels)


def _generate_selector(job: Obj) -> None:
    """``generateSelector``: the job-name and controller-uid labels (unless already set, which
    validation then checks) and a selector on ``batch.kubernetes.io/controller-uid``."""
    metadata, spec = job["metadata"], job["spec"]
    labels = spec["template"]["metadata"].setdefault("labels", {})
    if isinstance(labels, dict):
        for key in (LEGACY_JOB_NAME_LABEL, JOB_NAME_LABEL):
            labels.setdefault(key, metadata["name"])
        for key in (LEGACY_CONTROLLER_UID_LABEL, CONTROLLER_UID_LABEL):
            labels.setdefault(key, metadata["uid"])
    selector = spec.get("selector")
    if selector is None:
        selector = spec["selector"] = {}
    if isinstance(selector, dict):
        selector.setdefault("matchLabels", {})
        if isinstance(selector["matchLabels"], dict):
            selector["matchLabels"].setdefault(CONTROLLER_UID_LABEL, metadata["uid"])


def validate_job(job: Obj) -> list[Cause]:
    """``ValidateJob`` on a defaulted Job."""
    causes = validate_metadata(job, namespaced=True)
    spec = job.get("spec")
    if not isinstance(spec, dict):
        return [*causes, required("spec")]
    causes += _generated_selector_causes(job)
    causes += _spec_causes(spec)
    name = job["metadata"].get("name")
    completions = spec.get("completions")
    if spec.get("completionMode") == "Indexed" and isinstance(completions, int) and completions > 0:
        hostname = f"{name}-{completions - 1}"  # the hostname of the last index's pods
        if dns_label_causes("", hostname):
            detail = f"will not able to create pod with invalid DNS label: {hostname}"
            causes.append(invalid_value("metadata.name", name, detail))
    return causes


def _generated_selector_causes(job: Obj) -> list[Cause]:
    spec = job["spec"]
    if spec.get("manualSelector") is True or not isinstance(spec.get("selector"), dict):
        return []
    template = spec.get("template")
    labels = (template.get("metadata") or {}).get("labels") or {} if isinstance(template, dict) else {}
    metadata, causes = job["metadata"], []
    expected = {
        LEGACY_CONTROLLER_UID_LABEL: metadata.get("uid"),
        LEGACY_JOB_NAME_LABEL: metadata.get("name"),
        CONTROLLER_UID_LABEL: metadata.get("uid"),
        JOB_NAME_LABEL: metadata.get("name"),
    }
    for key, value in expected.items():  # ValidateHasLabel
        where = f"spec.template.metadata.labels[{key}]"
        if key not in labels:
            causes.append(required(where, f"must be '{value}'"))
        elif labels[key] != value:
            causes.append(invalid_value(where, labels, f"must be '{value}'"))
    if not selector_matches(spec["selector"], expected):
        causes.append(invalid_value("spec.selector", spec["selector"], "`selector` not auto-generated"))
    return causes


def _spec_causes(spec: Obj) -> list[Cause]:
    causes: list[Cause] = []
    for key in (
        "parallelism", "completions", "activeDeadlineSeconds", "backoffLimit", "ttlSecondsAfterFinished",
        "backoffLimitPerIndex", "maxFailedIndexes",
    ):  # fmt: skip
        causes += non_negative(spec, key, "spec")
    if spec.get("maxFailedIndexes") is not None and spec.get("backoffLimitPerIndex") is None:
        causes.append(required("spec.backoffLimitPerIndex", "when maxFailedIndexes is specified"))
    mode = spec.get("completionMode")
    if mode not in COMPLETION_MODES:
        causes.append(not_supported("spec.completionMode", mode, COMPLETION_MODES))
    if mode == "Indexed":
        if spec.get("completions") is None:
            causes.append(required("spec.completions", "when completion mode is Indexed"))
        parallelism = spec.get("parallelism")
        if isinstance(parallelism, int) and parallelism > MAX_PARALLELISM_INDEXED:
            detail = f"must be less than or equal to {MAX_PARALLELISM_INDEXED} when completion mode is Indexed"
            causes.append(invalid_value("spec.parallelism", parallelism, detail))
    else:
        for key in ("backoffLimitPerIndex", "maxFailedIndexes"):
            if spec.get(key) is not None:
                causes.append(invalid_value(f"spec.{key}", spec[key], "requires indexed completion mode"))
    if spec.get("podFailurePolicy") is not None:
        causes += _pod_failure_policy_causes(spec)
    if spec.get("successPolicy") is not None:
        if mode != "Indexed":
            causes.append(
                invalid_value("spec.successPolicy", spec["successPolicy"], "requires indexed completion mode")
            )
        else:
            causes += _success_policy_causes(spec)
    replacement = spec.get("podReplacementPolicy")
    if spec.get("podFailurePolicy") is not None and replacement != "Failed":
        causes.append(not_supported("spec.podReplacementPolicy", replacement, ["Failed"]))
    elif replacement not in REPLACEMENT_POLICIES:
        causes.append(not_supported("spec.podReplacementPolicy", replacement, REPLACEMENT_POLICIES))
    causes += _template_causes(spec)
    return causes


def _template_causes(spec: Obj) -> list[Cause]:
    template = spec.get("template")
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        return [required("spec.template.spec" if isinstance(template, dict) else "spec.template")]
    causes: list[Cause] = []
    selector = spec.get("selector")
    if selector is None:
        causes.append(required("spec.selector"))
    labels = (template.get("metadata") or {}).get("labels") or {}
    for value in labels.values():
        if isinstance(value, str) and len(value) > 63:
            causes.append(invalid_value("spec.template.metadata.labels", value, "must be no more than 63 characters"))
    if isinstance(selector, dict) and not selector_matches(selector, labels):
        causes.append(
            invalid_value("spec.template.metadata.labels", labels, "`selector` does not match template `labels`")
        )
    pod_spec = template["spec"]
    causes += validate_pod_spec(pod_spec, "spec.template.spec")
    policy = pod_spec.get("restartPolicy")
    if policy in ("Always", "", None):
        causes.append(required("spec.template.spec.restartPolicy", 'valid values: "OnFailure", "Never"'))
    elif policy not in ("OnFailure", "Never"):
        causes.append(not_supported("spec.template.spec.restartPolicy", policy, ["OnFailure", "Never"]))
    elif spec.get("podFailurePolicy") is not None and policy != "Never":
        detail = 'only "Never" is supported when podFailurePolicy is specified'
        causes.append(invalid_value("spec.template.spec.restartPolicy", policy, detail))
    return causes


def _pod_failure_policy_causes(spec: Obj) -> list[Cause]:
    policy = spec["podFailurePolicy"]
    rules = policy.get("rules") if isinstance(policy, dict) else None
    if not isinstance(rules, list):
        return [required("spec.podFailurePolicy.rules")]
    causes: list[Cause] = []
    if len(rules) > 20:
        causes.append(
            {"reason": "FieldValueTooMany", "field": "spec.podFailurePolicy.rules",
             "message": f"Too many: {len(rules)}: must have at most 20 items"}
        )  # fmt: skip
    template_spec = (spec.get("template") or {}).get("spec") or {}
    containers = {c.get("name") for k in ("containers", "initContainers") for c in template_spec.get(k) or []}
    for index, rule in enumerate(rules):
        where = f"spec.podFailurePolicy.rules[{index}]"
        if not isinstance(rule, dict):
            causes.append(invalid_value(where, rule, "must be an object"))
            continue
        action = rule.get("action")
        if not action:
            causes.append(required(f"{where}.action", f"valid values: {_quoted(ACTIONS)}"))
        elif action == "FailIndex":
            if spec.get("backoffLimitPerIndex") is None:
                causes.append(invalid_value(f"{where}.action", action, "requires the backoffLimitPerIndex to be set"))
        elif action not in ACTIONS:
            causes.append(not_supported(f"{where}.action", action, ACTIONS))
        on_exit, on_conditions = rule.get("onExitCodes"), rule.get("onPodConditions")
        if on_exit is not None:
            causes += _on_exit_codes_causes(on_exit, f"{where}.onExitCodes", containers)
        for number, pattern in enumerate(on_conditions or []):
            status_path = f"{where}.onPodConditions[{number}].status"
            if not isinstance(pattern, dict) or not pattern.get("type"):
                causes.append(required(f"{where}.onPodConditions[{number}].type"))
            elif pattern.get("status") not in CONDITION_STATUSES:
                causes.append(not_supported(status_path, pattern.get("status"), CONDITION_STATUSES))
        if on_exit is not None and on_conditions:
            causes.append(invalid_omitted(where, "specifying both OnExitCodes and OnPodConditions is not supported"))
        if on_exit is None and not on_conditions:
            causes.append(invalid_omitted(where, "specifying one of OnExitCodes and OnPodConditions is required"))
    return causes


def _success_policy_causes(spec: Obj) -> list[Cause]:
    """``validateSuccessPolicy`` (the commonly failed checks)."""
    rules = (spec["successPolicy"] or {}).get("rules") if isinstance(spec["successPolicy"], dict) else None
    if not rules:
        detail = "at least one rules must be specified when the successPolicy is specified"
        return [required("spec.successPolicy.rules", detail)]
    causes: list[Cause] = []
    completions = spec.get("completions")
    for index, rule in enumerate(rules):
        where = f"spec.successPolicy.rules[{index}]"
        count = rule.get("succeededCount") if isinstance(rule, dict) else None
        if not isinstance(rule, dict) or (count is None and rule.get("succeededIndexes") is None):
            causes.append(required(where, "at least one of succeededCount or succeededIndexes must be specified"))
        elif isinstance(count, int) and isinstance(completions, int) and count > completions:
            detail = f"must be less than or equal to {completions} (the number of specified completions)"
            causes.append(invalid_value(f"{where}.succeededCount", count, detail))
    return causes


def _on_exit_codes_causes(on_exit: Any, where: str, containers: set[Any]) -> list[Cause]:
    if not isinstance(on_exit, dict):
        return [invalid_value(where, on_exit, "must be an object")]
    causes: list[Cause] = []
    operator = on_exit.get("operator")
    if not operator:
        causes.append(required(f"{where}.operator", f"valid values: {_quoted(OPERATORS)}"))
    elif operator not in OPERATORS:
        causes.append(not_supported(f"{where}.operator", operator, OPERATORS))
    name = on_exit.get("containerName")
    if name is not None and name not in containers:
        detail = "must be one of the container or initContainer names in the pod template"
        causes.append(invalid_value(f"{where}.containerName", name, detail))
    values = on_exit.get("values")
    if not isinstance(values, list) or not values:
        causes.append(invalid_value(f"{where}.values", values, "at least one value is required"))
        return causes
    seen: set[int] = set()
    for number, value in enumerate(values):
        if operator == "In" and value == 0:
            causes.append(invalid_value(f"{where}.values[{number}]", value, "must not be 0 for the In operator"))
        if value in seen:
            causes.append(duplicate(f"{where}.values[{number}]", value))
        seen.add(value)
    if any(a > b for a, b in itertools.pairwise(values)):
        causes.append(invalid_value(f"{where}.values", values, "must be ordered"))
    return causes


def _quoted(values: list[str]) -> str:
    """Go's ``%q`` of a string slice: ``["Count" "FailIndex"]``."""
    return "[" + " ".join(f'"{v}"' for v in values) + "]"


def validate_job_update(new: Obj, old: Obj) -> list[Cause]:
    """``ValidateJobSpecUpdate``: the template and selector are immutable; completions too, except
    that an Indexed Job may change it together with parallelism (elastic Indexed Jobs, 1.31 GA)."""
    causes = validate_job(new)
    spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
    for key in ("selector", "template", "completionMode", "podFailurePolicy", "successPolicy", "backoffLimitPerIndex"):
        if spec.get(key) != old_spec.get(key):
            causes.append(invalid_omitted(f"spec.{key}", "field is immutable"))
    if spec.get("completions") != old_spec.get("completions"):
        elastic = spec.get("completionMode") == "Indexed" and spec.get("completions") == spec.get("parallelism")
        if not elastic:
            causes.append(invalid_omitted("spec.completions", "field is immutable"))
    return causes


def job_invalid(job: Obj, causes: list[Cause]) -> Exception:
    return invalid("Job", str((job.get("metadata") or {}).get("name") or ""), causes, group="batch")
