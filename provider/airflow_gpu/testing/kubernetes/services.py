"""Services as the API server stores them: defaults, validation and allocated addresses.

From ``pkg/apis/core/v1/defaults.go`` (``SetDefaults_Service``: type ``ClusterIP``, session
affinity ``None``, port protocol ``TCP``, ``targetPort`` = ``port``, internal traffic policy
``Cluster``), ``ValidateService`` (``pkg/apis/core/validation``) and the service REST storage,
which allocates a cluster IP from the service CIDR (``10.96.0.0/12`` here, kubeadm's default) and
node ports from 30000-32767. A headless Service (``clusterIP: None``) keeps ``None`` and needs no
ports. Endpoints are stored as written (the API server's own ``kubernetes`` ones come from
``system_objects``); no endpoints controller fills them for a selector, and EndpointSlices are not
emulated: headless Services feed the pod DNS names (``dns.py``) instead.
"""

from __future__ import annotations

import ipaddress
import re
import secrets
from typing import Any

from airflow_gpu.testing.kubernetes.objects import (
    DNS_1035_LABEL,
    DNS_LABEL,
    DNS_LABEL_MESSAGE,
    duplicate,
    forbidden,
    invalid,
    invalid_omitted,
    invalid_value,
    not_supported,
    required,
    validate_metadata,
)

Obj = dict[str, Any]
Cause = dict[str, str]

SERVICE_CIDR = ipaddress.ip_network("10.96.0.0/12")
NODE_PORTS = range(30000, 32768)
TYPES = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"]
PROTOCOLS = ["SCTP", "TCP", "UDP"]
AFFINITIES = ["ClientIP", "None"]
DNS_1035_MESSAGE = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for "
    "validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
PORT_RANGE_MESSAGE = "must be between 1 and 65535, inclusive"
PORT_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")


def is_headless(service: Obj) -> bool:
    return (service.get("spec") or {}).get("clusterIP") == "None"


def default_service(service: Obj) -> None:
    spec = service.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            if port.get("targetPort") in (None, 0, ""):
                port["targetPort"] = port.get("port")
    if spec["type"] != "ExternalName":
        spec.setdefault("internalTrafficPolicy", "Cluster")
    if spec["type"] in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    service.setdefault("status", {"loadBalancer": {}})


def validate_service(service: Obj) -> list[Cause]:
    causes = validate_metadata(service, namespaced=True)
    name = (service.get("metadata") or {}).get("name")
    if isinstance(name, str) and name and not (len(name) <= 63 and DNS_1035_LABEL.match(name)):
        causes = [c for c in causes if c["field"] != "metadata.name"]
        causes.append(invalid_value("metadata.name", name, DNS_1035_MESSAGE))
    spec = service.get("spec")
    if not isinstance(spec, dict):
        return [*causes, required("spec")]
    kind, cluster_ip, ports = spec.get("type"), spec.get("clusterIP"), spec.get("ports") or []
    if not isinstance(ports, list):
        return [*causes, invalid_value("spec.ports", ports, "must be a list")]
    if not ports and cluster_ip != "None" and kind != "ExternalName":
        causes.append(required("spec.ports"))
    if kind in ("LoadBalancer", "NodePort") and cluster_ip == "None":
        causes.append(invalid_value("spec.clusterIP", cluster_ip, f"may not be set to 'None' for {kind} services"))
    if kind == "ExternalName":
        if cluster_ip:
            causes.append(forbidden("spec.clusterIP", "may not be set for ExternalName services"))
        if not spec.get("externalName"):
            causes.append(required("spec.externalName"))
    elif cluster_ip not in (None, "", "None"):
        try:
            ipaddress.ip_address(cluster_ip)
        except ValueError:
            causes.append(invalid_value("spec.clusterIP", cluster_ip, "must be empty, 'None', or a valid IP address"))
    names: set[str] = set()
    seen: set[tuple[Any, Any]] = set()
    for index, port in enumerate(ports):
        where = f"spec.ports[{index}]"
        if not isinstance(port, dict):
            causes.append(invalid_value(where, port, "must be an object"))
            continue
        causes += _port_causes(port, where, len(ports) > 1, names)
        key = (port.get("protocol"), port.get("port"))
        if key in seen:
            causes.append(duplicate(where, {"port": key[1], "protocol": key[0]}))
        seen.add(key)
        if kind == "ClusterIP" and port.get("nodePort"):
            causes.append(forbidden(f"{where}.nodePort", "may not be used when `type` is 'ClusterIP'"))
    selector = spec.get("selector")
    if selector is not None and (
        not isinstance(selector, dict) or not all(isinstance(v, str) for v in selector.values())
    ):
        causes.append(invalid_omitted("spec.selector", "must map strings to strings"))
    if kind not in TYPES:
        causes.append(required("spec.type") if not kind else not_supported("spec.type", kind, TYPES))
    affinity = spec.get("sessionAffinity")
    if affinity not in AFFINITIES:
        causes.append(not_supported("spec.sessionAffinity", affinity, AFFINITIES))
    published = spec.get("publishNotReadyAddresses")
    if published is not None and not isinstance(published, bool):
        causes.append(invalid_value("spec.publishNotReadyAddresses", published, "must be a boolean"))
    return causes


def _port_causes(port: Obj, where: str, require_name: bool, names: set[str]) -> list[Cause]:
    causes: list[Cause] = []
    name = port.get("name")
    if require_name and not name:
        causes.append(required(f"{where}.name"))
    elif name:
        if not isinstance(name, str) or len(name) > 63 or not DNS_LABEL.match(name):
            causes.append(invalid_value(f"{where}.name", name, DNS_LABEL_MESSAGE))
        elif name in names:
            causes.append(duplicate(f"{where}.name", name))
        names.add(str(name))
    number = port.get("port")
    if not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= 65535:
        causes.append(invalid_value(f"{where}.port", number, PORT_RANGE_MESSAGE))
    protocol = port.get("protocol")
    if protocol not in PROTOCOLS:
        causes.append(not_supported(f"{where}.protocol", protocol, PROTOCOLS))
    target = port.get("targetPort")
    if isinstance(target, int) and not isinstance(target, bool):
        if not 1 <= target <= 65535:
            causes.append(invalid_value(f"{where}.targetPort", target, PORT_RANGE_MESSAGE))
    elif not isinstance(target, str) or not (len(target) <= 15 and PORT_NAME.match(target) and "--" not in target):
        detail = "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"
        causes.append(invalid_value(f"{where}.targetPort", target, detail))
    node_port = port.get("nodePort")
    if node_port is not None and (not isinstance(node_port, int) or node_port not in NODE_PORTS):
        detail = (
            f"provided port is not in the valid range. The range of valid ports is {NODE_PORTS[0]}-{NODE_PORTS[-1]}"
        )
        causes.append(invalid_value(f"{where}.nodePort", node_port, detail))
    return causes


class Addresses:
    """The service IP and node port allocators (the ``ipallocator`` and ``portallocator``)."""

    def __init__(self) -> None:
        self.ips: set[str] = set()
        self.node_ports: set[int] = set()

    def allocate(self, service: Obj) -> None:
        """Give a new Service its addresses, or 422 when the asked ones are taken or out of range."""
        spec, name = service["spec"], service["metadata"]["name"]
        kind = spec.get("type")
        if kind == "ExternalName":
            return
        ip = spec.get("clusterIP") or (spec.get("clusterIPs") or [None])[0]
        if ip == "None":
            spec["clusterIP"], spec["clusterIPs"] = "None", ["None"]
        else:
            ip = self._ip(name, ip)
            spec["clusterIP"], spec["clusterIPs"] = ip, [ip]
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        if kind in ("NodePort", "LoadBalancer"):
            for index, port in enumerate(spec.get("ports") or []):
                port["nodePort"] = self._node_port(name, index, port.get("nodePort"))
        if spec["clusterIP"] != "None":
            self.ips.add(spec["clusterIP"])

    def _ip(self, name: str, wanted: str | None) -> str:
        if wanted:
            if ipaddress.ip_address(wanted) not in SERVICE_CIDR:
                detail = (
                    f"failed to allocate IP {wanted}: the provided IP ({wanted}) is not in the valid range. "
                    f"The range of valid IPs is {SERVICE_CIDR}"
                )
                raise invalid("Service", name, [invalid_value("spec.clusterIPs", [wanted], detail)])
            if wanted in self.ips:
                detail = f"failed to allocate IP {wanted}: provided IP is already allocated"
                raise invalid("Service", name, [invalid_value("spec.clusterIPs", [wanted], detail)])
            return wanted
        while True:  # 10.96.0.1 is the kubernetes Service's on a real cluster
            candidate = str(SERVICE_CIDR[secrets.randbelow(SERVICE_CIDR.num_addresses - 12) + 10])
            if candidate not in self.ips:
                return candidate

    def _node_port(self, name: str, index: int, wanted: Any) -> int:
        if wanted:
            if wanted in self.node_ports:
                detail = "provided port is already allocated"
                raise invalid("Service", name, [invalid_value(f"spec.ports[{index}].nodePort", wanted, detail)])
            self.node_ports.add(int(wanted))
            return int(wanted)
        while True:
            port = NODE_PORTS[0] + secrets.randbelow(len(NODE_PORTS))
            if port not in self.node_ports:
                self.node_ports.add(port)
                return port

    def release(self, service: Obj) -> None:
        spec = service.get("spec") or {}
        self.ips.discard(spec.get("clusterIP", ""))
        for port in spec.get("ports") or []:
            self.node_ports.discard(port.get("nodePort"))


def keep_allocated(new: Obj, old: Obj) -> list[Cause]:
    """On update: an omitted cluster IP or node port keeps the allocated one (``patchAllocatedValues``);
    a changed cluster IP is refused (immutable)."""
    spec, old_spec = new.setdefault("spec", {}), old.get("spec") or {}
    if old_spec.get("type") == "ExternalName" or spec.get("type") == "ExternalName":
        return []
    if not spec.get("clusterIP"):
        spec["clusterIP"] = old_spec.get("clusterIP")
        spec["clusterIPs"] = old_spec.get("clusterIPs")
    for key in ("ipFamilies", "ipFamilyPolicy"):
        spec.setdefault(key, old_spec.get(key))
    old_ports = {(p.get("port"), p.get("protocol")): p.get("nodePort") for p in old_spec.get("ports") or []}
    for port in spec.get("ports") or []:
        if (
            isinstance(port, dict)
            and not port.get("nodePort")
            and old_ports.get((port.get("port"), port.get("protocol")))
        ):
            port["nodePort"] = old_ports[(port.get("port"), port.get("protocol"))]
    if spec.get("clusterIP") != old_spec.get("clusterIP"):
        return [invalid_value("spec.clusterIPs[0]", spec.get("clusterIP"), "may not change once set")]
    return []
