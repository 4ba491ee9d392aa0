"""Server-side ``meta.k8s.io/v1 Table`` output, as ``kubectl get`` asks for it.

kubectl sends ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io,...`` on every ``get`` and
prints the columns and cells the server returns; without a Table it falls back to NAME and AGE.
The columns and cells here follow the kube-apiserver's printers
(``pkg/printers/internalversion/printers.go`` in kubernetes/kubernetes, 1.30 and later: ``printPod``,
``printNode``, ``printJob``, ``printService``, ``printNamespace``, ``printEvent``,
``printResourceQuota``...), computed with ``Wide: true`` as the server does: kubectl hides the
``priority: 1`` columns unless ``-o wide``. A kind without a printer gets the server's default
table (Name, Created At). Each row carries the object as ``includeObject`` asks (``Metadata`` by
default: a ``PartialObjectMetadata``, from which kubectl reads ``--show-labels``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

Obj = dict[str, Any]
Column = tuple[str, str, int, str]  # name, type, priority, description

NAME_DOC = (
    "Name must be unique within a namespace. Is required when creating resources, although some resources may allow "
    "a client to request the generation of an appropriate name automatically. Name is primarily intended for creation "
    "idempotence and configuration definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
AGE_DOC = (
    "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed "
    "to be set in happens-before order across separate operations. Clients may not set this value. It is represented "
    "in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)
NAME: Column = ("Name", "string", 0, NAME_DOC)
AGE: Column = ("Age", "string", 0, AGE_DOC)
WANTS_TABLE = "as=Table"


def wants_table(accept: str | None) -> bool:
    """Whether the client asked for ``meta.k8s.io`` Table output (kubectl ``get``)."""
    return bool(accept) and WANTS_TABLE in str(accept).replace(" ", "")


# --- time ----------------------------------------------------------------------------------


def _parse(stamp: str | None) -> datetime | None:
    if not stamp:
        return None
    text = stamp.replace("Z", "+00:00")
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def human_duration(seconds_total: float) -> str:
    """``k8s.io/apimachinery/pkg/util/duration.HumanDuration``."""
    seconds = int(seconds_total)
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        rest = seconds % 60
        return f"{minutes}m" if rest == 0 else f"{minutes}m{rest}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = seconds // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h" if rest == 0 else f"{hours}h{rest}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d" if rest == 0 else f"{hours // 24}d{rest}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def since(stamp: str | None, now: datetime) -> str:
    """``translateTimestampSince``: ``<unknown>`` for a zero time."""
    moment = _parse(stamp)
    return "<unknown>" if moment is None else human_duration((now - moment).total_seconds())


# --- printers ------------------------------------------------------------------------------


def _true(conditions: list[Obj] | None, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions or [])


def _format_labels(labels: dict[str, str] | None) -> str:
    """``labels.FormatLabels``: sorted ``k=v`` pairs, ``<none>`` when empty."""
    return ",".join(f"{k}={v}" for k, v in sorted((labels or {}).items())) or "<none>"


def _format_selector(selector: Obj | None) -> str:
    """``metav1.FormatLabelSelector``."""
    if not selector:
        return "<none>"
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        if operator == "Exists":
            parts.append(key)
        elif operator == "DoesNotExist":
            parts.append(f"!{key}")
        else:
            parts.append(f"{key} {operator.lower()} ({','.join(values)})")
    return ",".join(parts) or "<none>"


def _containers(spec: Obj) -> list[str]:
    containers = spec.get("containers") or []
    return [",".join(c.get("name", "") for c in containers), ",".join(c.get("image", "") for c in containers)]


POD_COLUMNS: list[Column] = [
    NAME,
    ("Ready", "string", 0, "The aggregate readiness state of this pod for accepting traffic."),
    ("Status", "string", 0, "The aggregate status of the containers in this pod."),
    (
        "Restarts",
        "string",
        0,
        "The number of times the containers in this pod have been restarted and when the last container in this pod "
        "has restarted.",
    ),
    AGE,
    ("IP", "string", 1, "podIP is the IP address allocated to the pod."),
    ("Node", "string", 1, "NodeName indicates in which node this pod is scheduled."),
    ("Nominated Node", "string", 1, "nominatedNodeName is set only when this pod preempts other pods on the node."),
    ("Readiness Gates", "string", 1, "If specified, all readiness gates will be evaluated for pod readiness."),
]


def pod_status(pod: Obj) -> tuple[str, int, int, str | None]:
    """``printPod``'s STATUS, ready containers, restarts and the last restart's time."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or ""
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"
    restarts = ready = 0
    last_restart: str | None = None
    sidecars = {c["name"] for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"}
    sidecar_restarts, sidecar_last = 0, None
    init_count = len(spec.get("initContainers") or [])
    initializing = False
    for index, container in enumerate(status.get("initContainerStatuses") or []):
        restarts += container.get("restartCount", 0)
        finished = ((container.get("lastState") or {}).get("terminated") or {}).get("finishedAt")
        if finished and (last_restart is None or finished > last_restart):
            last_restart = finished
        state = container.get("state") or {}
        if container.get("name") in sidecars:
            sidecar_restarts += container.get("restartCount", 0)
            sidecar_last = last_restart
            if container.get("started") and container.get("ready"):
                ready += 1
            continue
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated is not None and terminated.get("exitCode", 0) == 0:
            continue
        if terminated is not None:
            if terminated.get("reason"):
                reason = "Init:" + terminated["reason"]
            elif terminated.get("signal"):
                reason = f"Init:Signal:{terminated['signal']}"
            else:
                reason = f"Init:ExitCode:{terminated.get('exitCode', 0)}"
        elif waiting is not None and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            reason = "Init:" + waiting["reason"]
        else:
            reason = f"Init:{index}/{init_count}"
        initializing = True
        break
    if not initializing or _true(status.get("conditions"), "Initialized"):
        restarts, last_restart = sidecar_restarts, sidecar_last
        running = False
        for container in reversed(status.get("containerStatuses") or []):
            restarts += container.get("restartCount", 0)
            finished = ((container.get("lastState") or {}).get("terminated") or {}).get("finishedAt")
            if finished and (last_restart is None or finished > last_restart):
                last_restart = finished
            state = container.get("state") or {}
            waiting, terminated = state.get("waiting"), state.get("terminated")
            if waiting is not None and waiting.get("reason"):
                reason = waiting["reason"]
            elif terminated is not None and terminated.get("reason"):
                reason = terminated["reason"]
            elif terminated is not None:
                signal = terminated.get("signal")
                reason = f"Signal:{signal}" if signal else f"ExitCode:{terminated.get('exitCode', 0)}"
            elif container.get("ready") and state.get("running") is not None:
                running = True
                ready += 1
        if reason == "Completed" and running:
            reason = "Running" if _true(status.get("conditions"), "Ready") else "NotReady"
    deleting = (pod.get("metadata") or {}).get("deletionTimestamp")
    if deleting and status.get("reason") == "NodeLost":
        reason = "Unknown"
    elif deleting and status.get("phase") not in ("Succeeded", "Failed"):
        reason = "Terminating"
    return reason, ready, restarts, last_restart


def _pod(pod: Obj, now: datetime) -> tuple[list[Any], list[Obj]]:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    reason, ready, restarts, last_restart = pod_status(pod)
    restarts_text = str(restarts)
    if restarts and last_restart:
        restarts_text = f"{restarts} ({since(last_restart, now)} ago)"
    ips = status.get("podIPs") or []
    gates = spec.get("readinessGates") or []
    gates_text = "<none>"
    if gates:
        wanted = {g.get("conditionType") for g in gates}
        met = sum(1 for c in status.get("conditions") or [] if c.get("type") in wanted and c.get("status") == "True")
        gates_text = f"{met}/{len(gates)}"
    cells = [
        pod["metadata"]["name"],
        f"{ready}/{len(spec.get('containers') or [])}",
        reason,
        restarts_text,
        since(pod["metadata"].get("creationTimestamp"), now),
        (ips[0].get("ip") if ips else "") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        gates_text,
    ]
    conditions: list[Obj] = []
    if status.get("phase") == "Succeeded":
        conditions = [_row_completed("Succeeded", "The pod has completed successfully.")]
    elif status.get("phase") == "Failed":
        conditions = [_row_completed("Failed", "The pod failed.")]
    return cells, conditions


def _row_completed(reason: str, message: str) -> Obj:
    return {"type": "Completed", "status": "True", "reason": reason, "message": message}


NODE_COLUMNS: list[Column] = [
    NAME,
    ("Status", "string", 0, "The status of the node"),
    ("Roles", "string", 0, "The roles of the node"),
    AGE,
    ("Version", "string", 0, "Kubelet Version reported by the node."),
    ("Internal-IP", "string", 1, "List of addresses reachable to the node."),
    ("External-IP", "string", 1, "List of addresses reachable to the node."),
    ("OS-Image", "string", 1, "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy))."),
    ("Kernel-Version", "string", 1, "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)."),
    ("Container-Runtime", "string", 1, "ContainerRuntime Version reported by the node through runtime remote API."),
]


def _node(node: Obj, now: datetime) -> tuple[list[Any], list[Obj]]:
    status = node.get("status") or {}
    states = []
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Ready":
            states.append("Ready" if condition.get("status") == "True" else "NotReady")
    if not states:
        states.append("Unknown")
    if (node.get("spec") or {}).get("unschedulable"):
        states.append("SchedulingDisabled")
    roles = set()
    for key, value in (node["metadata"].get("labels") or {}).items():
        if key.startswith("node-role.kubernetes.io/") and key.removeprefix("node-role.kubernetes.io/"):
            roles.add(key.removeprefix("node-role.kubernetes.io/"))
        elif key == "kubernetes.io/role" and value:
            roles.add(value)
    info = status.get("nodeInfo") or {}

    def address(kind: str) -> str:
        return next((a["address"] for a in status.get("addresses") or [] if a.get("type") == kind), "<none>")

    cells = [
        node["metadata"]["name"],
        ",".join(states),
        ",".join(sorted(roles)) or "<none>",
        since(node["metadata"].get("creationTimestamp"), now),
        info.get("kubeletVersion", ""),
        address("InternalIP"),
        address("ExternalIP"),
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]
    return cells, []


TEMPLATE_COLUMNS: list[Column] = [
    ("Containers", "string", 1, "Names of each container in the template."),
    ("Images", "string", 1, "Images referenced by each container in the template."),
]
JOB_COLUMNS: list[Column] = [
    NAME,
    ("Status", "string", 0, "Status of the job."),
    ("Completions", "string", 0, "The number of pods which reached phase Succeeded."),
    ("Duration", "string", 0, "Time required to complete the job."),
    AGE,
    *TEMPLATE_COLUMNS,
    ("Selector", "string", 1, "A label query over pods that should match the pod count."),
]


def _job(job: Obj, now: datetime) -> tuple[list[Any], list[Obj]]:
    spec, status = job.get("spec") or {}, job.get("status") or {}
    succeeded = status.get("succeeded", 0)
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{spec['completions']}"
    elif (spec.get("parallelism") or 0) > 1:
        completions = f"{succeeded}/1 of {spec['parallelism']}"
    else:
        completions = f"{succeeded}/1"
    start, end = _parse(status.get("startTime")), _parse(status.get("completionTime"))
    duration = "" if start is None else human_duration(((end or now) - start).total_seconds())
    conditions = status.get("conditions")
    if _true(conditions, "Complete"):
        state = "Complete"
    elif _true(conditions, "Failed"):
        state = "Failed"
    elif job["metadata"].get("deletionTimestamp"):
        state = "Terminating"
    elif _true(conditions, "Suspended"):
        state = "Suspended"
    elif _true(conditions, "FailureTarget"):
        state = "FailureTarget"
    elif _true(conditions, "SuccessCriteriaMet"):
        state = "SuccessCriteriaMet"
    else:
        state = "Running"
    template = (spec.get("template") or {}).get("spec") or {}
    cells = [
        job["metadata"]["name"],
        state,
        completions,
        duration,
        since(job["metadata"].get("creationTimestamp"), now),
    ]
    return [*cells, *_containers(template), _format_selector(spec.get("selector"))], []


SERVICE_COLUMNS: list[Column] = [
    NAME,
    ("Type", "string", 0, "type determines how the Service is exposed."),
    ("Cluster-IP", "string", 0, "clusterIP is the IP address of the service and is usually assigned randomly."),
    (
        "External-IP",
        "string",
        0,
        "externalIPs is a list of IP addresses for which nodes in the cluster will also "
        "accept traffic for this service.",
    ),
    ("Port(s)", "string", 0, "The list of ports that are exposed by this service."),
    AGE,
    ("Selector", "string", 1, "Route service traffic to pods with label keys and values matching this selector."),
]


def _service(service: Obj, now: datetime) -> tuple[list[Any], list[Obj]]:
    spec = service.get("spec") or {}
    kind = spec.get("type", "")
    external = spec.get("externalIPs") or []
    if kind == "LoadBalancer":
        ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        names = [i.get("ip") or i.get("hostname") for i in ingress] + external
        external_text = ",".join(n for n in names if n) or "<pending>"
    elif kind == "ExternalName":
        external_text = spec.get("externalName", "")
    else:
        external_text = ",".join(external) or "<none>"
    ports = []
    for port in spec.get("ports") or []:
        protocol = port.get("protocol", "TCP")
        node_port = port.get("nodePort") or 0
        ports.append(f"{port['port']}:{node_port}/{protocol}" if node_port > 0 else f"{port['port']}/{protocol}")
    cells = [
        service["metadata"]["name"],
        kind,
        (spec.get("clusterIPs") or [spec.get("clusterIP") or "<none>"])[0],
        external_text,
        ",".join(ports) or "<none>",
        since(service["metadata"].get("creationTimestamp"), now),
        _format_labels(spec.get("selector")),
    ]
    return cells, []


NAMESPACE_COLUMNS: list[Column] = [NAME, ("Status", "string", 0, "The status of the namespace"), AGE]


def _namespace(namespace: Obj, now: datetime) -> tuple[list[Any], list[Obj]]:
    phase = (namespace.get("status") or {}).get("phase", "")
    return [namespace["metadata"]["name"], phase, since(namespace["metadata"].get("creationTimestamp"), now)], []


EVENT_COLUMNS: list[Column] = [
    ("Last Seen", "string", 0, "The time at which the most recent occurrence of this event was recorded."),
    ("Type", "string", 0, "Type of this event (Normal, Warning), new types could be added in the future"),
    (
        "Reason",
        "string",
        0,
        "This should be a short, machine understandable string that gives the reason for the "
        "transition into the object's current status.",
    ),
    ("Object", "string", 0, "The object that this event is about."),
    (
        "Subobject",
        "string",
        1,
        "If referring to a piece of an object instead of an entire object, this string "
        "should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2].",
    ),
    ("Source", "string", 1, "The component reporting this event. Should be a short machine understandable string."),
    ("Message", "string", 0, "A human-readable description of the status of this operation."),
    (
        "First Seen",
        "string",
        1,
        "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)",
    ),
    ("Count", "string", 1, "The number of times this event has occurred."),
    ("Name", "string", 1, NAME_DOC),
]


def _event(event: Obj, now: datetime) -> tuple[list[Any], list[Obj]]:
    first = since(event.get("firstTimestamp") or event.get("eventTime"), now)
    last = since(event.get("lastTimestamp"), now) if event.get("lastTimestamp") else first
    count = event.get("count") or 0
    series = event.get("series")
    if series:
        last, count = since(series.get("lastObservedTime"), now), series.get("count", 0)
    elif count == 0:
        count = 1
    involved = event.get("involvedObject") or {}
    kind = str(involved.get("kind", "")).lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    source = event.get("source") or {}
    if source.get("component"):
        source_text = source["component"] + (f", {source['host']}" if source.get("host") else "")
    else:
        controller, instance = event.get("reportingComponent", ""), event.get("reportingInstance", "")
        source_text = controller + (f", {instance}" if instance else "")
    cells = [
        last, event.get("type", ""), event.get("reason", ""), target, involved.get("fieldPath", ""), source_text,
        str(event.get("message", "")).strip(), first, count, event["metadata"]["name"],
    ]  # fmt: skip
    return cells, []


QUOTA_COLUMNS: list[Column] = [
    NAME,
    AGE,
    ("Request", "string", 0, "Request represents a minimum amount of cpu/memory that a container may consume."),
    (
        "Limit",
        "string",
        0,
        "Limits control the maximum amount of cpu/memory that a container may use independent of "
        "contention on the node.",
    ),
]


def _quota(quota: Obj, now: datetime) -> tuple[list[Any], list[Obj]]:
    """From ``status`` (what the quota controller last counted), as ``printResourceQuota`` reads it."""
    status = quota.get("status") or {}
    hard, used = status.get("hard") or {}, status.get("used") or {}
    requests: list[str] = []
    limits: list[str] = []
    for name in sorted(hard):
        column = limits if name.split(".")[0] == "limits" and "." in name else requests
        column.append(f"{name}: {used.get(name, '0')}/{hard[name]}")
    cells = [quota["metadata"]["name"], since(quota["metadata"].get("creationTimestamp"), now)]
    return [*cells, ", ".join(requests), ", ".join(limits)], []


CONFIG_MAP_COLUMNS: list[Column] = [NAME, ("Data", "string", 0, "Number of data entries."), AGE]
SECRET_COLUMNS: list[Column] = [
    NAME, ("Type", "string", 0, "The type of the secret"), ("Data", "string", 0, "The number of entries."), AGE,
]  # fmt: skip
SERVICE_ACCOUNT_COLUMNS: list[Column] = [NAME, ("Secrets", "string", 0, "Number of secrets."), AGE]
ENDPOINTS_COLUMNS: list[Column] = [
    NAME,
    (
        "Endpoints",
        "string",
        0,
        "IP addresses which offer the related ports that are marked as ready. These endpoints should be "
        "considered safe for load balancers and clients to utilize.",
    ),
    AGE,
]


def _config_map(obj: Obj, now: datetime) -> tuple[list[Any], list[Obj]]:
    data = len(obj.get("data") or {}) + len(obj.get("binaryData") or {})
    return [obj["metadata"]["name"], data, since(obj["metadata"].get("creationTimestamp"), now)], []


def _endpoints(obj: Obj, now: datetime) -> tuple[list[Any], list[Obj]]:
    """``formatEndpoints``: ``ip:port`` per ready address and port, three at most, then ``+ N more...``."""
    shown: list[str] = []
    count = 0
    for subset in obj.get("subsets") or []:
        ports = subset.get("ports") or [{}]
        for port in ports:
            for address in subset.get("addresses") or []:
                count += 1
                if len(shown) < 3:
                    number = port.get("port")
                    shown.append(f"{address.get('ip')}:{number}" if number else str(address.get("ip")))
    text = ",".join(shown) + (f" + {count - 3} more..." if count > 3 else "") if shown else "<none>"
    return [obj["metadata"]["name"], text, since(obj["metadata"].get("creationTimestamp"), now)], []


def _secret(obj: Obj, now: datetime) -> tuple[list[Any], list[Obj]]:
    cells = [obj["metadata"]["name"], obj.get("type", ""), len(obj.get("data") or {})]
    return [*cells, since(obj["metadata"].get("creationTimestamp"), now)], []


def _service_account(obj: Obj, now: datetime) -> tuple[list[Any], list[Obj]]:
    return [
        obj["metadata"]["name"],
        len(obj.get("secrets") or []),
        since(obj["metadata"].get("creationTimestamp"), now),
    ], []


DEFAULT_COLUMNS: list[Column] = [
    NAME,
    (
        "Created At",
        "date",
        0,
        "CreationTimestamp is a timestamp representing the server time when this object was created.",
    ),
]


def _default(obj: Obj, now: datetime) -> tuple[list[Any], list[Obj]]:
    return [obj["metadata"]["name"], obj["metadata"].get("creationTimestamp")], []


Printer = Callable[[Obj, datetime], tuple[list[Any], list[Obj]]]
PRINTERS: dict[str, tuple[list[Column], Printer]] = {
    "pods": (POD_COLUMNS, _pod),
    "nodes": (NODE_COLUMNS, _node),
    "jobs": (JOB_COLUMNS, _job),
    "services": (SERVICE_COLUMNS, _service),
    "namespaces": (NAMESPACE_COLUMNS, _namespace),
    "events": (EVENT_COLUMNS, _event),
    "resourcequotas": (QUOTA_COLUMNS, _quota),
    "configmaps": (CONFIG_MAP_COLUMNS, _config_map),
    "secrets": (SECRET_COLUMNS, _secret),
    "endpoints": (ENDPOINTS_COLUMNS, _endpoints),
    "serviceaccounts": (SERVICE_ACCOUNT_COLUMNS, _service_account),
}


def _row_object(obj: Obj, include: str) -> Obj | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}


def table(plural: str, items: list[Obj], list_metadata: Obj, include_object: str | None = None) -> Obj:
    """A ``meta.k8s.io/v1`` Table of ``items`` of kind ``plural``."""
    columns, printer = PRINTERS.get(plural, (DEFAULT_COLUMNS, _default))
    now = datetime.now(timezone.utc)
    rows = []
    for item in items:
        cells, conditions = printer(item, now)
        row: Obj = {"cells": cells}
        if conditions:
            row["conditions"] = conditions
        shown = _row_object(item, include_object or "Metadata")
        if shown is not None:
            row["object"] = shown
        rows.append(row)
    definitions = [
        {"name": name, "type": kind, "format": "name" if (name, kind) == ("Name", "string") else "",
         "description": doc, "priority": priority}
        for name, kind, priority, doc in columns
    ]  # fmt: skip
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_metadata,
        "columnDefinitions": definitions,
        "rows": rows,
    }


def from_list(plural: str, listing: Obj, include_object: str | None = None) -> Obj:
    """A ``<Kind>List`` as the Table the API server would have answered (its metadata kept: resourceVersion,
    continue, remainingItemCount)."""
    return table(plural, listing.get("items") or [], listing.get("metadata") or {}, include_object)


def from_object(plural: str, obj: Obj, include_object: str | None = None) -> Obj:
    """One object (a GET by name, or a watch event's object) as a one-row Table."""
    metadata = {"resourceVersion": obj.get("metadata", {}).get("resourceVersion", "")}
    return table(plural, [obj], metadata, include_object)
