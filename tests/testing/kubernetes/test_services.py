"""Services as the API server keeps them, and the pod DNS names a headless Service gives, through
the unmodified client: what ``ValidateService`` refuses, what ``SetDefaults_Service`` and the
allocators fill in, and ``<hostname>.<subdomain>`` reaching another pod of an Indexed Job.
"""

from __future__ import annotations

import ipaddress
import json
import sys
from typing import Any

import pytest
from kubernetes import client

from tests.testing.kubernetes.conftest import phase_is, pod_manifest, wait_for
from tests.testing.kubernetes.test_jobs import finished, job_manifest, job_pods, log


def service(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": spec}


def test_a_cluster_ip_service_gets_its_address_and_defaults(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_service("default", service("web", selector={"app": "web"}, ports=[{"port": 80}]))
    spec = created.spec
    assert ipaddress.ip_address(spec.cluster_ip) in ipaddress.ip_network("10.96.0.0/12")
    assert spec.cluster_ips == [spec.cluster_ip]
    assert (spec.type, spec.session_affinity, spec.internal_traffic_policy) == ("ClusterIP", "None", "Cluster")
    assert (spec.ip_families, spec.ip_family_policy) == (["IPv4"], "SingleStack")
    [port] = spec.ports
    assert (port.port, port.protocol, port.target_port) == (80, "TCP", 80)
    assert created.status.load_balancer is not None
    other = core.create_namespaced_service("default", service("api", ports=[{"port": 80}]))
    assert other.spec.cluster_ip != spec.cluster_ip
    updated = core.patch_namespaced_service("web", "default", {"metadata": {"labels": {"tier": "front"}}})
    assert updated.spec.cluster_ip == spec.cluster_ip
    with pytest.raises(client.ApiException) as immutable:
        core.patch_namespaced_service("web", "default", {"spec": {"clusterIP": "10.96.0.99"}})
    assert immutable.value.status == 422 and "may not change once set" in immutable.value.body


def test_a_headless_service_keeps_none_and_needs_no_ports(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_service("default", service("rdzv", clusterIP="None", selector={"job-name": "x"}))
    assert (created.spec.cluster_ip, created.spec.cluster_ips, created.spec.ports) == ("None", ["None"], None)
    assert core.read_namespaced_service("rdzv", "default").spec.cluster_ip == "None"


@pytest.mark.parametrize(
    ("name", "spec", "field", "message"),
    [
        ("web", {"selector": {"app": "web"}}, "spec.ports", "Required value"),
        ("1web", {"clusterIP": "None"}, "metadata.name", "a DNS-1035 label must consist of lower case"),
        ("web", {"ports": [{"port": 0}]}, "spec.ports[0].port",
         "Invalid value: 0: must be between 1 and 65535, inclusive"),
        ("web", {"ports": [{"port": 80}, {"port": 81}]}, "spec.ports[0].name", "Required value"),
        ("web", {"ports": [{"port": 80, "protocol": "HTTP"}]}, "spec.ports[0].protocol",
         'Unsupported value: "HTTP": supported values: "SCTP", "TCP", "UDP"'),
        ("web", {"type": "NodePort", "clusterIP": "None", "ports": [{"port": 80}]}, "spec.clusterIP",
         """Invalid value: "None": may not be set to 'None' for NodePort services"""),
        ("web", {"clusterIP": "10.0.0.1", "ports": [{"port": 80}]}, "spec.clusterIPs",
         "is not in the valid range. The range of valid IPs is 10.96.0.0/12"),
    ],
)  # fmt: skip
def test_services_a_cluster_refuses(
    core: client.CoreV1Api, name: str, spec: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_service("default", service(name, **spec))
    body = json.loads(refused.value.body)
    assert refused.value.status == 422 and body["message"].startswith(f'Service "{name}" is invalid: ')
    assert any(c["field"] == field and message in c["message"] for c in body["details"]["causes"]), body


SERVER = (
    "import os, socket\n"
    "server = socket.socket(); server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "server.bind(('0.0.0.0', int(os.environ['PORT']))); server.listen()\n"
    "peer, _ = server.accept(); peer.sendall(('hello from ' + os.environ['HOSTNAME']).encode()); peer.close()\n"
)
CLIENT = (
    "import os, socket, time\n"
    "for _ in range(200):\n"
    "    try:\n"
    "        peer = socket.create_connection((os.environ['MAIN'], int(os.environ['PORT'])), timeout=1); break\n"
    "    except OSError:\n"
    "        time.sleep(0.05)  # the workload retries until index 0 listens, as clients do\n"
    "print(os.environ['MAIN'], peer.recv(100).decode())\n"
)


def test_indexed_pods_rendezvous_at_index_0_through_a_headless_service(
    core: client.CoreV1Api, batch: client.BatchV1Api, unused_tcp_port: int
) -> None:
    """Index 0 serves, index 1 connects to ``MAIN=<job>-0.<svc>``; ``publishNotReadyAddresses``, as
    rendezvous Services set it, publishes index 0's name before it is Ready."""
    core.create_namespaced_service(
        "default",
        service("workers", clusterIP="None", selector={"batch.kubernetes.io/job-name": "ddp"},
                publishNotReadyAddresses=True),
    )  # fmt: skip
    python = sys.executable
    script = f'if [ "$JOB_COMPLETION_INDEX" = 0 ]; then exec {python} -c "$SERVER"; else exec {python} -c "$CLIENT"; fi'
    env = [
        {"name": "MAIN", "value": "ddp-0.workers"},
        {"name": "PORT", "value": str(unused_tcp_port)},
        {"name": "SERVER", "value": SERVER},
        {"name": "CLIENT", "value": CLIENT},
    ]
    manifest = job_manifest(
        "ddp", script, container={"env": env}, completionMode="Indexed", completions=2, parallelism=2,
        template_spec={"subdomain": "workers"},
    )  # fmt: skip
    batch.create_namespaced_job("default", manifest)
    job = wait_for(finished(batch, "ddp"), timeout=30)
    assert [c.type for c in job.status.conditions] == ["SuccessCriteriaMet", "Complete"]
    [worker] = [p for p in job_pods(core, "ddp") if p.spec.hostname == "ddp-1"]
    assert worker.spec.subdomain == "workers"
    assert worker.spec.containers[0].env[0].value == "ddp-0.workers"  # the object keeps the name
    assert log(core, worker.metadata.name) == "127.0.0.1 hello from ddp-0\n"  # the process got this host


@pytest.fixture
def unused_tcp_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def names_seen(core: client.CoreV1Api, name: str, namespace: str = "default", **env: str) -> dict[str, str]:
    """Start a pod that prints its environment variables ``env`` and return what it saw."""
    keys = sorted(env)
    manifest = pod_manifest(
        name,
        ["sh", "-c", " ".join(f'echo "{k}=${k}";' for k in ["HOSTNAME", *keys])],
        container={"env": [{"name": k, "value": env[k]} for k in keys]},
    )
    core.create_namespaced_pod(namespace, manifest)
    wait_for(lambda: core.read_namespaced_pod(name, namespace).status.phase == "Succeeded")
    text = core.read_namespaced_pod_log(name, namespace, _preload_content=False).data.decode()
    return dict(line.split("=", 1) for line in text.splitlines())


def test_pod_names_resolve_only_while_the_pod_is_ready(core: client.CoreV1Api) -> None:
    """Without ``publishNotReadyAddresses`` a pod's name is published only once it is Ready: before,
    the value reaches the process unchanged, as an unresolvable name would."""
    core.create_namespaced_service("default", service("peers", clusterIP="None", selector={"role": "peer"}))
    target = pod_manifest(
        "target", ["sleep", "30"], labels={"role": "peer"}, hostname="node-a", subdomain="peers",
        initContainers=[{"name": "warm-up", "image": "busybox", "command": ["sleep", "3"]}],
    )  # fmt: skip
    core.create_namespaced_pod("default", target)
    wait_for(lambda: core.read_namespaced_pod("target", "default").status.pod_ip)
    forms = {
        "SHORT": "node-a.peers", "NS": "node-a.peers.default", "SVC": "node-a.peers.default.svc",
        "FQDN": "node-a.peers.default.svc.cluster.local", "HEADLESS": "peers",
        "OTHER_SUBDOMAIN": "node-a.elsewhere", "OTHER_HOST": "node-b.peers",
    }  # fmt: skip
    before = names_seen(core, "early", **forms)
    assert {k: before[k] for k in forms} == forms  # not Ready yet: nothing resolves
    wait_for(phase_is(core, "target", "Running"))
    wait_for(
        lambda: any(
            c.type == "Ready" and c.status == "True"
            for c in core.read_namespaced_pod("target", "default").status.conditions
        )
    )
    after = names_seen(core, "late", **forms)
    for key in ("SHORT", "NS", "SVC", "FQDN", "HEADLESS"):
        assert after[key] == "127.0.0.1", key
    assert (after["OTHER_SUBDOMAIN"], after["OTHER_HOST"]) == ("node-a.elsewhere", "node-b.peers")
    assert after["HOSTNAME"] == "late"  # no spec.hostname: the pod name
    core.create_namespace({"metadata": {"name": "team-b"}})
    elsewhere = names_seen(core, "remote", "team-b", SHORT="node-a.peers", NS="node-a.peers.default")
    assert (elsewhere["SHORT"], elsewhere["NS"]) == ("node-a.peers", "127.0.0.1")  # the search path is per namespace


def test_a_pod_resolves_its_own_names_and_hostname(core: client.CoreV1Api) -> None:
    """``/etc/hosts`` maps a pod's own hostname and fully qualified name, Ready or not, Service or not."""
    core.create_namespaced_pod(
        "default",
        pod_manifest(
            "me", ["sh", "-c", 'echo "$HOSTNAME $SELF $FQDN"'], hostname="rank-0", subdomain="nowhere",
            container={"env": [{"name": "SELF", "value": "rank-0"},
                               {"name": "FQDN", "value": "rank-0.nowhere.default.svc.cluster.local"}]},
        ),
    )  # fmt: skip
    wait_for(phase_is(core, "me", "Succeeded"))
    assert log(core, "me") == "rank-0 127.0.0.1 127.0.0.1\n"
