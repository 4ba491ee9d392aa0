"""What a cluster holds from its first second: the ``kubernetes`` Service and ``kube-root-ca.crt``.

The API server's ``kubernetesservice`` controller (``pkg/controlplane/controller/kubernetesservice``)
keeps Service ``kubernetes`` in ``default``: labels ``component=apiserver`` and
``provider=kubernetes``, ``ClusterIP`` with the first address of the service range (``10.96.0.1``),
no selector, one port ``https`` 443/TCP whose ``targetPort`` is the API server's own port. Its
endpoint reconciler (``pkg/controlplane/reconcilers``) keeps the Endpoints ``kubernetes`` beside it
(the API server's address and port, label ``endpointslice.kubernetes.io/skip-mirror=true``). Both
come back when deleted. The emulator's address is its listening host (a real server's advertise
address is never a loopback one); the EndpointSlice the reconciler also writes is not emulated
(``discovery.k8s.io`` is not served).

The controller manager's root CA publisher (``pkg/controller/certificates/rootcacertpublisher``,
Kubernetes 1.21+) keeps ConfigMap ``kube-root-ca.crt`` in every namespace that is not terminating,
holding only ``ca.crt`` and the ``kubernetes.io/description`` annotation: created with the
namespace, created again when deleted, written back when changed. The emulator serves plain HTTP,
so its CA (below, a fixed self-signed certificate) verifies nothing; it is there because clients,
scripts and projected token volumes expect it.
"""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any

from airflow_gpu.testing.kubernetes.services import SERVICE_CIDR, Addresses
from airflow_gpu.testing.kubernetes.store import Obj, Store

KUBERNETES_SERVICE = "kubernetes"
SYSTEM_NAMESPACE = "default"
ROOT_CA_CONFIG_MAP = "kube-root-ca.crt"
DESCRIPTION_ANNOTATION = "kubernetes.io/description"
ROOT_CA_DESCRIPTION = (
    "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such "
    "as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions "
    "of Kubernetes clusters."
)
#: A self-signed CA, ``CN=kubernetes`` (P-256), valid for a century; the emulator signs nothing with it.
ROOT_CA_PEM = (
    "-----BEGIN CERTIFICATE-----\n"
    "MIIBkjCCATegAwIBAgIUceTabErF9X9viG74xmIPGD0KurgwCgYIKoZIzj0EAwIw\n"
    "FTETMBEGA1UEAwwKa3ViZXJuZXRlczAgFw0yNjExMjYxNTMyMTFaGA8yMTI2MTEw\n"
    "MjE1MzIxMVowFTETMBEGA1UEAwwKa3ViZXJuZXRlczBZMBMGByqGSM49AgEGCCqG\n"
    "SM49AwEHA0IABGLvJrejsFzjNvJCngMPlL5LXKkw4MK/+jPVRvlHFLksURj4i0BD\n"
    "UQ7AGbes4ZawPN076T9j8UFpXtOLRfBXgISjYzBhMB0GA1UdDgQWBBT5erLjBypU\n"
    "UxgvNqhLEHhemwFLyzAfBgNVHSMEGDAWgBT5erLjBypUUxgvNqhLEHhemwFLyzAP\n"
    "BgNVHRMBAf8EBTADAQH/MA4GA1UdDwEB/wQEAwICpDAKBggqhkjOPQQDAgNJADBG\n"
    "AiEApAwfr7cDZrT2O5EI1eiK9jyBKmIY/0hZ3ZHA+bg6MpQCIQDwTaGG3MXv6U7m\n"
    "iLPAwpmncfEzOqcOsajPIlETYHHEaA==\n"
    "-----END CERTIFICATE-----\n"
)
SERVICE_LABELS = {"component": "apiserver", "provider": "kubernetes"}
SKIP_MIRROR = {"endpointslice.kubernetes.io/skip-mirror": "true"}


def _soon(callback: Any, *args: Any) -> None:
    """A listener only queues work: the store is not changed while it tells of a change."""
    asyncio.get_running_loop().call_soon(callback, *args)


class RootCAPublisher:
    """Keeps ``kube-root-ca.crt`` in every namespace, as the controller manager does."""

    def __init__(self, store: Store) -> None:
        self.store = store
        store.subscribe(self._observe)

    def sync(self, namespace: str) -> None:
        owner = self.store.find("namespaces", "", namespace)
        if owner is None or owner["metadata"].get("deletionTimestamp"):
            return
        current = self.store.find("configmaps", namespace, ROOT_CA_CONFIG_MAP)
        data = {"ca.crt": ROOT_CA_PEM}
        if current is None:
            metadata = {"name": ROOT_CA_CONFIG_MAP, "annotations": {DESCRIPTION_ANNOTATION: ROOT_CA_DESCRIPTION}}
            self.store.create("configmaps", namespace, {"metadata": metadata, "data": data})
            return
        annotations = current["metadata"].get("annotations") or {}
        if current.get("data") == data and annotations.get(DESCRIPTION_ANNOTATION) == ROOT_CA_DESCRIPTION:
            return
        current["data"] = data  # the publisher's update replaces the data whole
        current.pop("binaryData", None)
        current["metadata"]["annotations"] = {**annotations, DESCRIPTION_ANNOTATION: ROOT_CA_DESCRIPTION}
        self.store.update("configmaps", current)

    def _observe(self, plural: str, event: str, obj: Obj) -> None:
        metadata = obj["metadata"]
        if plural == "namespaces" and event in ("ADDED", "MODIFIED"):
            _soon(self.sync, metadata["name"])
        elif plural == "configmaps" and event in ("MODIFIED", "DELETED") and metadata["name"] == ROOT_CA_CONFIG_MAP:
            _soon(self.sync, metadata["namespace"])


class KubernetesServiceController:
    """Keeps Service and Endpoints ``kubernetes`` in ``default`` once the API server listens."""

    def __init__(self, store: Store, addresses: Addresses) -> None:
        self.store = store
        self.addresses = addresses
        self.host = ""
        self.port = 0
        store.subscribe(self._observe)

    def publish(self, host: str, port: int) -> None:
        """The API server listens on ``host:port``: write (or write again) what points at it."""
        self.host, self.port = host, port
        self.sync()

    def service(self) -> Obj:
        ip = str(SERVICE_CIDR[1])
        return {
            "metadata": {"name": KUBERNETES_SERVICE, "labels": dict(SERVICE_LABELS)},
            "spec": {
                "type": "ClusterIP",
                "clusterIP": ip,
                "clusterIPs": [ip],
                "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": self.port}],
                "sessionAffinity": "None",
                "ipFamilies": ["IPv4"],
                "ipFamilyPolicy": "SingleStack",
                "internalTrafficPolicy": "Cluster",
            },
            "status": {"loadBalancer": {}},
        }

    def endpoints(self) -> Obj:
        try:
            address = str(ipaddress.ip_address(self.host))
        except ValueError:
            address = "127.0.0.1"
        return {
            "metadata": {"name": KUBERNETES_SERVICE, "labels": dict(SKIP_MIRROR)},
            "subsets": [
                {"addresses": [{"ip": address}], "ports": [{"name": "https", "port": self.port, "protocol": "TCP"}]}
            ],
        }

    def sync(self) -> None:
        if not self.port or self.store.find("namespaces", "", SYSTEM_NAMESPACE) is None:
            return
        if self.store.find("services", SYSTEM_NAMESPACE, KUBERNETES_SERVICE) is None:
            service = self.service()
            if service["spec"]["clusterIP"] not in self.addresses.ips:
                self.addresses.allocate(service)
                self.store.create("services", SYSTEM_NAMESPACE, service)
        if self.store.find("endpoints", SYSTEM_NAMESPACE, KUBERNETES_SERVICE) is None:
            self.store.create("endpoints", SYSTEM_NAMESPACE, self.endpoints())

    def _observe(self, plural: str, event: str, obj: Obj) -> None:
        metadata = obj["metadata"]
        if (
            event == "DELETED"
            and plural in ("services", "endpoints")
            and (metadata.get("namespace"), metadata["name"]) == (SYSTEM_NAMESPACE, KUBERNETES_SERVICE)
        ):
            _soon(self.sync)
