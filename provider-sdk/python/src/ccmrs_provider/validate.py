"""Contract validation: the server checks requests before a provider sees
them, and the provider's answers before they are sent. Every failure is a
:class:`Violation` naming the offending field, with the same field paths
as the Rust SDK (``service.ports[0].protocol``, ``node.name``, ...).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from google.protobuf.descriptor import EnumDescriptor
from google.protobuf.message import Message

from ccmrs.cloudprovider.v1 import identity_pb2, instances_pb2, types_pb2

#: Longest object name accepted (Kubernetes' DNS-1123 subdomain limit).
MAX_NAME_BYTES = 253
#: Largest total size of one object's annotations (Kubernetes' limit).
MAX_ANNOTATIONS_BYTES = 256 * 1024
#: Longest label value (Kubernetes' limit).
MAX_LABEL_VALUE_BYTES = 63
#: Longest label key: a 253-byte prefix, '/', a 63-byte name.
MAX_LABEL_KEY_BYTES = 253 + 1 + 63

_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")

M = TypeVar("M", bound=Message)

_UNCLASSED_SERVICES = identity_pb2.DESCRIPTOR.enum_types_by_name["UnclassedServices"]


class Violation(ValueError):
    """A contract violation: which field, and what is wrong with it."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def _len(s: str) -> int:
    return len(s.encode())


def required(field: str, value: M | None) -> M:
    if value is None:
        raise Violation(field, "is required")
    return value


def present(message: Message, name: str) -> Any:
    """``message.<name>`` if that sub-message is set, else None."""
    return getattr(message, name) if message.HasField(name) else None


def name(field: str, value: str) -> None:
    if not value:
        raise Violation(field, "is required")
    if _len(value) > MAX_NAME_BYTES:
        raise Violation(field, f"is {_len(value)} bytes, more than {MAX_NAME_BYTES}")


def _parse_ip(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if "%" in value:  # no IPv6 zone ids
        return None
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        return None


def ip(field: str, value: str) -> None:
    """An IP address in its canonical text (RFC 5952 for IPv6), the form the
    contract sends and compares: "2001:DB8::1" and "2001:db8:0:0:0:0:0:1"
    are refused naming the canonical form, an IPv4-mapped IPv6 address
    naming the IPv4 one. As the Rust and Go SDKs."""
    parsed = _parse_ip(value)
    if parsed is None:
        raise Violation(field, f"{value!r} is not an IP address")
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
        raise Violation(field, f"{value!r} is an IPv4-mapped IPv6 address; use the IPv4 address")
    canonical = str(parsed)
    if canonical != value:
        raise Violation(field, f"{value!r} is not in canonical form; use {canonical!r}")


def cidr(field: str, value: str) -> None:
    """``address/prefix``; the host bits need not be zero. The prefix is
    decimal digits without a sign or a leading zero, as parsers of
    ``address/prefix`` in other languages take it."""
    addr, sep, prefix = value.partition("/")
    parsed = _parse_ip(addr)
    ok = (
        sep
        and parsed is not None
        and prefix.isascii()
        and prefix.isdigit()
        and (len(prefix) == 1 or not prefix.startswith("0"))
        and int(prefix) <= (32 if parsed.version == 4 else 128)
    )
    if not ok:
        raise Violation(field, f"{value!r} is not a CIDR")


def known_enum(field: str, value: int, enum: EnumDescriptor) -> None:
    """An enum field that must hold a known, non-zero value."""
    if value == 0:
        raise Violation(field, "is UNSPECIFIED")
    if value not in enum.values_by_number:
        raise Violation(field, f"unknown enum value {value}")


def optional_enum(field: str, value: int, enum: EnumDescriptor) -> None:
    """An enum field where zero means unset but other values must be known."""
    if value != 0 and value not in enum.values_by_number:
        raise Violation(field, f"unknown enum value {value}")


def _is_label_name(s: str) -> bool:
    return len(s) <= 63 and _LABEL_NAME.fullmatch(s) is not None


def is_dns_subdomain(s: str) -> bool:
    return _len(s) <= MAX_NAME_BYTES and all(
        len(part) <= 63 and _DNS_LABEL.fullmatch(part) for part in s.split(".")
    )


def is_dns_label(s: str) -> bool:
    """A DNS-1123 label of at most 63 characters (provider names)."""
    return len(s) <= 63 and _DNS_LABEL.fullmatch(s) is not None


def label_value(field: str, v: str) -> None:
    if _len(v) > MAX_LABEL_VALUE_BYTES:
        raise Violation(field, f"label value is {_len(v)} bytes, more than {MAX_LABEL_VALUE_BYTES}")
    if v and not _is_label_name(v):
        raise Violation(field, f"{v!r} is not a valid label value")


def label_key(field: str, k: str) -> None:
    prefix, sep, rest = k.partition("/")
    key_name = rest if sep else k
    if (
        _len(k) > MAX_LABEL_KEY_BYTES
        or not _is_label_name(key_name)
        or (sep and not is_dns_subdomain(prefix))
    ):
        raise Violation(field, f"{k!r} is not a valid label key")


def labels(field: str, values: Mapping[str, str]) -> None:
    for k, v in values.items():
        f = f"{field}[{k}]"
        label_key(f, k)
        label_value(f, v)


def provider_id(field: str, v: str) -> None:
    """``<scheme>://<id>``, no whitespace."""
    name(field, v)
    scheme, sep, rest = v.partition("://")
    if not (sep and scheme and rest) or any(c.isspace() for c in v):
        raise Violation(field, f"{v!r} is not of the form <scheme>://<id>")


def annotations(field: str, values: Mapping[str, str]) -> None:
    total = 0
    for k, v in values.items():
        if not k:
            raise Violation(field, "annotation key is empty")
        total += _len(k) + _len(v)
    if total > MAX_ANNOTATIONS_BYTES:
        raise Violation(
            field, f"annotations total {total} bytes, more than {MAX_ANNOTATIONS_BYTES}"
        )


# ---- whole messages ----

_IP_TYPES = (types_pb2.NODE_ADDRESS_TYPE_INTERNAL_IP, types_pb2.NODE_ADDRESS_TYPE_EXTERNAL_IP)


def node_address(field: str, a: types_pb2.NodeAddress) -> None:
    known_enum(f"{field}.type", a.type, types_pb2.NodeAddressType.DESCRIPTOR)
    if not a.address:
        raise Violation(f"{field}.address", "is required")
    if a.type in _IP_TYPES:
        ip(f"{field}.address", a.address)
    elif not is_dns_subdomain(a.address):
        raise Violation(f"{field}.address", f"{a.address!r} is not a DNS name")


def node_addresses(field: str, addresses: Iterable[types_pb2.NodeAddress]) -> None:
    for i, a in enumerate(addresses):
        node_address(f"{field}[{i}]", a)


def node_ref(field: str, node: types_pb2.NodeRef | None) -> types_pb2.NodeRef:
    n = required(field, node)
    name(f"{field}.name", n.name)
    node_addresses(f"{field}.addresses", n.addresses)
    labels(f"{field}.labels", n.labels)
    annotations(f"{field}.annotations", n.annotations)
    return n


def node_refs(field: str, nodes: Iterable[types_pb2.NodeRef]) -> None:
    for i, n in enumerate(nodes):
        node_ref(f"{field}[{i}]", n)


def _looks_like_ip(s: str) -> bool:
    """An IP address as the apiserver reads one (Go's ``ParseIPSloppy``),
    which also takes IPv4 octets with leading zeros: "010.0.0.1" is no
    hostname."""
    if _parse_ip(s) is not None:
        return True
    octets = s.split(".")
    return len(octets) == 4 and all(
        1 <= len(o) <= 3 and o.isascii() and o.isdigit() and int(o) <= 255 for o in octets
    )


def load_balancer_status(field: str, status: types_pb2.LoadBalancerStatus) -> None:
    """What the apiserver accepts in ``status.loadBalancer.ingress[]``: the
    controller writes the status to the Service as it is."""
    for i, ing in enumerate(status.ingress):
        f = f"{field}.ingress[{i}]"
        if not ing.ip and not ing.hostname:
            raise Violation(f, "neither ip nor hostname is set")
        if ing.ip:
            ip(f"{f}.ip", ing.ip)
        if ing.hostname:
            if not is_dns_subdomain(ing.hostname):
                raise Violation(f"{f}.hostname", f"{ing.hostname!r} is not a DNS name")
            if _looks_like_ip(ing.hostname):
                raise Violation(f"{f}.hostname", f"{ing.hostname!r} is an IP address; use ip")
        optional_enum(f"{f}.ip_mode", ing.ip_mode, types_pb2.IpMode.DESCRIPTOR)
        if ing.ip_mode and not ing.ip:
            raise Violation(
                f"{f}.ip_mode", "is set without ip (Kubernetes allows ipMode only with an ip)"
            )
        for j, p in enumerate(ing.ports):
            known_enum(f"{f}.ports[{j}].protocol", p.protocol, types_pb2.Protocol.DESCRIPTOR)


def _service_fields(field: str, s: types_pb2.Service) -> None:
    name(f"{field}.namespace", s.namespace)
    name(f"{field}.name", s.name)
    name(f"{field}.uid", s.uid)
    labels(f"{field}.labels", s.labels)
    annotations(f"{field}.annotations", s.annotations)
    for i, p in enumerate(s.ports):
        f = f"{field}.ports[{i}]"
        known_enum(f"{f}.protocol", p.protocol, types_pb2.Protocol.DESCRIPTOR)
        if not 1 <= p.port <= 65535:
            raise Violation(f"{f}.port", f"{p.port} is not 1-65535")
        if not 0 <= p.node_port <= 65535:
            raise Violation(f"{f}.node_port", f"{p.node_port} is not 0-65535")
    for i, r in enumerate(s.load_balancer_source_ranges):
        cidr(f"{field}.load_balancer_source_ranges[{i}]", r)
    policy = types_pb2.TrafficPolicy.DESCRIPTOR
    known_enum(f"{field}.external_traffic_policy", s.external_traffic_policy, policy)
    optional_enum(f"{field}.internal_traffic_policy", s.internal_traffic_policy, policy)
    known_enum(
        f"{field}.session_affinity", s.session_affinity, types_pb2.SessionAffinity.DESCRIPTOR
    )
    for i, fam in enumerate(s.ip_families):
        known_enum(f"{field}.ip_families[{i}]", fam, types_pb2.IpFamily.DESCRIPTOR)
    optional_enum(
        f"{field}.ip_family_policy", s.ip_family_policy, types_pb2.IpFamilyPolicy.DESCRIPTOR
    )
    if s.load_balancer_ip:
        ip(f"{field}.load_balancer_ip", s.load_balancer_ip)
    for i, c in enumerate(s.cluster_ips):
        if c != "None":
            ip(f"{field}.cluster_ips[{i}]", c)
    if s.HasField("status"):
        load_balancer_status(f"{field}.status", s.status)


def service_ref(field: str, service: types_pb2.Service | None) -> types_pb2.Service:
    """A Service as the reads and the delete need it: ports well-formed but
    none required (a Service whose ports were dropped must still lose its
    load balancer)."""
    s = required(field, service)
    _service_fields(field, s)
    return s


def service(field: str, service: types_pb2.Service | None) -> types_pb2.Service:
    """A Service as EnsureLoadBalancer and UpdateLoadBalancer need it: at
    least one port."""
    s = required(field, service)
    _service_fields(field, s)
    if not s.ports:
        raise Violation(f"{field}.ports", "at least one port is required")
    return s


def volume(field: str, v: Any) -> Any:
    v = required(field, v)
    name(f"{field}.name", v.name)
    name(f"{field}.driver", v.driver)
    name(f"{field}.volume_id", v.volume_id)
    labels(f"{field}.labels", v.labels)
    return v


def route(field: str, r: Any) -> Any:
    r = required(field, r)
    cidr(f"{field}.destination_cidr", r.destination_cidr)
    if not r.blackhole:
        name(f"{field}.target_node", r.target_node)
    node_addresses(f"{field}.target_node_addresses", r.target_node_addresses)
    return r


#: The most queries one BatchInstances request may carry (contract 1.4.0).
MAX_BATCH_QUERIES = 500

_QUESTION = instances_pb2.DESCRIPTOR.enum_types_by_name["InstanceQuestion"]


def batch_instances_request(request: Any) -> None:
    """What makes a whole BatchInstances request invalid (contract 1.4.0): 1
    to MAX_BATCH_QUERIES queries, each key non-empty, at most 253 bytes and
    distinct, each question known. A query's node is not checked here: a bad
    node fails only its query, with the error the single call answers."""
    queries = request.queries
    if not queries:
        raise Violation("queries", "at least one query is required")
    if len(queries) > MAX_BATCH_QUERIES:
        raise Violation("queries", f"has {len(queries)} queries, more than {MAX_BATCH_QUERIES}")
    seen: dict[str, int] = {}
    for i, q in enumerate(queries):
        field = f"queries[{i}]"
        name(f"{field}.key", q.key)
        if q.key in seen:
            raise Violation(f"{field}.key", f"{q.key!r} is also the key of queries[{seen[q.key]}]")
        seen[q.key] = i
        known_enum(f"{field}.question", q.question, _QUESTION)


# ---- answers ----


def instance_metadata(m: Any) -> None:
    """An InstanceMetadata: a well-formed providerID if any (empty is allowed:
    it is only needed for a Node that has none), label-safe instance type,
    zone and region (they become Node labels), parseable addresses, valid
    extra labels."""
    if m.provider_id:
        provider_id("metadata.provider_id", m.provider_id)
    label_value("metadata.instance_type", m.instance_type)
    label_value("metadata.zone", m.zone)
    label_value("metadata.region", m.region)
    node_addresses("metadata.node_addresses", m.node_addresses)
    labels("metadata.additional_labels", m.additional_labels)


def warnings(field: str, values: Iterable[Any]) -> None:
    """Warnings become Warning Events: a CamelCase reason and a message."""
    for i, w in enumerate(values):
        if not re.fullmatch(r"[A-Z][A-Za-z0-9]*", w.reason):
            raise Violation(f"{field}[{i}].reason", f"{w.reason!r} is not CamelCase")
        if not w.message:
            raise Violation(f"{field}[{i}].message", "is required")


#: Most providerID schemes one provider may own (contract 1.2.0).
MAX_PROVIDER_ID_SCHEMES = 16
#: Most warnings about a Node one InstanceMetadata answer may carry.
MAX_NODE_WARNINGS = 16
#: Longest Event reason the API server takes.
MAX_REASON_BYTES = 128


def scheme(field: str, value: str) -> None:
    """A providerID scheme: the part before ``://``."""
    if not value:
        raise Violation(field, "is required")
    if len(value) > MAX_NAME_BYTES or re.search(r"[:/\s]", value):
        raise Violation(field, f"{value!r} is not a providerID scheme (the part before '://')")


def provider_id_schemes(info: Any) -> None:
    """``provider_id_schemes``: empty, or valid schemes, none twice, at most
    16, ``provider_id_scheme`` among them."""
    schemes = list(info.provider_id_schemes)
    if not schemes:
        return
    _distinct("provider_id_schemes", schemes, MAX_PROVIDER_ID_SCHEMES, scheme)
    if info.provider_id_scheme not in schemes:
        raise Violation(
            "provider_id_schemes",
            f"does not contain provider_id_scheme {info.provider_id_scheme!r}",
        )


#: Most ``spec.loadBalancerClass`` values one provider may serve (contract 1.3.0).
MAX_LOAD_BALANCER_CLASSES = 32
#: Most KEP-5778 platforms one provider may manage (contract 1.3.0).
MAX_PLATFORMS = 16


def load_balancer_class(field: str, value: str) -> None:
    """A ``spec.loadBalancerClass`` a provider serves: a label key WITH its
    DNS-subdomain prefix, for example ``example.com/cloud`` (Kubernetes
    reserves unprefixed classes for end users)."""
    prefix, sep, _ = value.partition("/")
    try:
        label_key(field, value)
        ok = bool(sep and prefix)
    except Violation:
        ok = False
    if not ok:
        raise Violation(
            field,
            f"{value!r} is not a loadBalancerClass: a DNS-subdomain prefix, '/' and a name "
            "(for example 'example.com/cloud')",
        )


def platform(field: str, value: str) -> None:
    """A KEP-5778 platform: a DNS-1123 label of at most 63 characters."""
    if not is_dns_label(value):
        raise Violation(field, f"{value!r} is not a DNS-1123 label of at most 63 characters")


def _distinct(field: str, values: list[str], most: int, check: Any) -> None:
    if len(values) > most:
        raise Violation(field, f"has {len(values)} entries, more than {most}")
    for i, v in enumerate(values):
        check(f"{field}[{i}]", v)
        if v in values[:i]:
            raise Violation(f"{field}[{i}]", f"{v!r} is listed twice")


def load_balancer_classes(info: Any) -> None:
    """``load_balancer_classes`` (1.3.0): valid classes, none twice, at most 32."""
    _distinct(
        "load_balancer_classes",
        list(info.load_balancer_classes),
        MAX_LOAD_BALANCER_CLASSES,
        load_balancer_class,
    )


def platforms(info: Any) -> None:
    """``platforms`` (1.3.0): DNS-1123 labels, none twice, at most 16."""
    _distinct("platforms", list(info.platforms), MAX_PLATFORMS, platform)


def unclassed_services(info: Any) -> None:
    """``unclassed_services`` (1.3.0) holds a value of the contract: what a
    provider must send (a receiver reads an unknown one as UNSPECIFIED)."""
    optional_enum("unclassed_services", info.unclassed_services, _UNCLASSED_SERVICES)


def serves_unclassed(info: Any) -> bool:
    """Whether the provider serves Services without a class as the default:
    unless it DECLINES them (UNSPECIFIED and unknown values count as served)."""
    return info.unclassed_services != identity_pb2.UNCLASSED_SERVICES_DECLINED


def is_owned_provider_id(provider_id: str, schemes: Iterable[str]) -> bool:
    """Whether ``provider_id`` is ``<scheme>://<id>`` with one of ``schemes``."""
    s, sep, rest = provider_id.partition("://")
    return bool(sep and s and rest) and s in schemes


def owned_provider_id(metadata: Any, schemes: list[str]) -> None:
    """An InstanceMetadata's providerID, if any, is of a scheme owned."""
    pid = metadata.provider_id
    if pid and not is_owned_provider_id(pid, schemes):
        raise Violation(
            "metadata.provider_id",
            f"{pid!r} is not of a scheme the provider owns ({', '.join(schemes)}; "
            "announce more with ProviderInfo.also_owns)",
        )


def node_warnings(field: str, values: list[Any]) -> None:
    """Warnings about a Node: at most 16, each with a CamelCase reason of at
    most 128 characters and a message."""
    if len(values) > MAX_NODE_WARNINGS:
        raise Violation(field, f"has {len(values)} entries, more than {MAX_NODE_WARNINGS}")
    for i, w in enumerate(values):
        if len(w.reason) > MAX_REASON_BYTES:
            raise Violation(f"{field}[{i}].reason", f"is longer than {MAX_REASON_BYTES}")
    warnings(field, values)
