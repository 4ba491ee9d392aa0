"""Which cluster DNS names a pod could resolve, so that the kubelet can point them at this host.

On a cluster, CoreDNS answers from the Services and their EndpointSlices: a headless Service
(``clusterIP: None``) with a selector gets ``<svc>.<ns>.svc.cluster.local`` for the addresses of the
pods it selects, and a selected pod with ``spec.hostname`` and ``spec.subdomain`` naming that
Service gets ``<hostname>.<subdomain>.<ns>.svc.cluster.local``; only while the pod is Ready, unless
the Service sets ``publishNotReadyAddresses`` (docs: "DNS for Services and Pods"). A pod's
``/etc/hosts`` (written by the kubelet, ``managedHostsFileContent``) maps its own hostname and,
with a subdomain, its own fully qualified name. Shorter forms resolve through the search path the
kubelet writes to ``/etc/resolv.conf``: ``<ns>.svc.cluster.local svc.cluster.local cluster.local``
with ``ndots:5``, so ``<job>-0.<svc>`` works from the same namespace and ``<job>-0.<svc>.<ns>`` from
any.

Every emulated pod is a process on this host, so a name that would resolve is the loopback
address. Cluster IPs (``ClusterIP`` Services) are not reachable (there is no kube-proxy), so only
headless names count.
"""

from __future__ import annotations

import re
from typing import Any

from airflow_gpu.testing.kubernetes.store import Obj, Store

CLUSTER_DOMAIN = "cluster.local"
SERVICE_SUFFIX = f".svc.{CLUSTER_DOMAIN}"
LOOPBACK = "127.0.0.1"
NDOTS = 5
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\.?$")


def pod_hostname(pod: Obj) -> str:
    """``GeneratePodHostNameAndDomain``: ``spec.hostname``, else the pod name cut to 63 characters."""
    hostname = str((pod.get("spec") or {}).get("hostname") or pod["metadata"]["name"])
    return hostname if len(hostname) <= 63 else hostname[:63].rstrip("-.")


def own_names(pod: Obj) -> set[str]:
    """What the pod's ``/etc/hosts`` maps to its own address."""
    hostname = pod_hostname(pod)
    names = {hostname}
    subdomain = (pod.get("spec") or {}).get("subdomain")
    if subdomain:
        names.add(f"{hostname}.{subdomain}.{pod['metadata']['namespace']}{SERVICE_SUFFIX}")
    return names


def search_candidates(name: str, namespace: str) -> list[str]:
    """The fully qualified names a resolver tries for ``name`` with the pod's search path."""
    if name.endswith("."):
        return [name[:-1]]
    expanded = [f"{name}.{domain}" for domain in (f"{namespace}{SERVICE_SUFFIX}", SERVICE_SUFFIX[1:], CLUSTER_DOMAIN)]
    return [*expanded, name] if name.count(".") < NDOTS else [name, *expanded]


def endpoint_pods(store: Store, service: Obj) -> list[Obj]:
    """The pods a headless Service's DNS names resolve to: selected, with an address, not finished,
    and Ready (or any state but deleted, with ``publishNotReadyAddresses``)."""
    spec = service.get("spec") or {}
    selector = spec.get("selector")
    if spec.get("clusterIP") != "None" or not isinstance(selector, dict) or not selector:
        return []
    publish_not_ready = spec.get("publishNotReadyAddresses") is True
    namespace = service["metadata"]["namespace"]

    def serves(pod: Obj) -> bool:
        labels = pod["metadata"].get("labels") or {}
        status = pod.get("status") or {}
        if any(labels.get(k) != v for k, v in selector.items()) or not status.get("podIP"):
            return False
        if status.get("phase") in ("Succeeded", "Failed"):
            return False
        if publish_not_ready:
            return True
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        return ready and not pod["metadata"].get("deletionTimestamp")

    return store.list("pods", namespace, serves)


def resolves(store: Store, pod: Obj, value: Any) -> bool:
    """Whether ``value`` is exactly a DNS name that would resolve, from ``pod``, to an emulated pod."""
    if not isinstance(value, str) or not value or len(value) > 254:
        return False
    name = value.lower()
    if not _NAME.match(name):
        return False
    hosts = own_names(pod)  # /etc/hosts is read for each name the search path makes
    for fqdn in search_candidates(name, pod["metadata"]["namespace"]):
        if fqdn in hosts:
            return True
        if not fqdn.endswith(SERVICE_SUFFIX):
            continue
        labels = fqdn[: -len(SERVICE_SUFFIX)].split(".")
        if len(labels) == 2:  # <service>.<namespace>
            service = store.find("services", labels[1], labels[0])
            if service is not None and endpoint_pods(store, service):
                return True
        elif len(labels) == 3:  # <hostname>.<subdomain>.<namespace>
            hostname, subdomain, namespace = labels
            service = store.find("services", namespace, subdomain)
            if service is None:
                continue
            for target in endpoint_pods(store, service):
                spec = target.get("spec") or {}
                if spec.get("hostname") == hostname and spec.get("subdomain") == subdomain:
                    return True
    return False
