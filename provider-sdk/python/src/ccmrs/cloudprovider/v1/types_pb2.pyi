from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NodeAddressType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NODE_ADDRESS_TYPE_UNSPECIFIED: _ClassVar[NodeAddressType]
    NODE_ADDRESS_TYPE_HOSTNAME: _ClassVar[NodeAddressType]
    NODE_ADDRESS_TYPE_INTERNAL_IP: _ClassVar[NodeAddressType]
    NODE_ADDRESS_TYPE_EXTERNAL_IP: _ClassVar[NodeAddressType]
    NODE_ADDRESS_TYPE_INTERNAL_DNS: _ClassVar[NodeAddressType]
    NODE_ADDRESS_TYPE_EXTERNAL_DNS: _ClassVar[NodeAddressType]

class Protocol(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROTOCOL_UNSPECIFIED: _ClassVar[Protocol]
    PROTOCOL_TCP: _ClassVar[Protocol]
    PROTOCOL_UDP: _ClassVar[Protocol]
    PROTOCOL_SCTP: _ClassVar[Protocol]

class TrafficPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRAFFIC_POLICY_UNSPECIFIED: _ClassVar[TrafficPolicy]
    TRAFFIC_POLICY_CLUSTER: _ClassVar[TrafficPolicy]
    TRAFFIC_POLICY_LOCAL: _ClassVar[TrafficPolicy]

class SessionAffinity(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SESSION_AFFINITY_UNSPECIFIED: _ClassVar[SessionAffinity]
    SESSION_AFFINITY_NONE: _ClassVar[SessionAffinity]
    SESSION_AFFINITY_CLIENT_IP: _ClassVar[SessionAffinity]

class IpFamily(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    IP_FAMILY_UNSPECIFIED: _ClassVar[IpFamily]
    IP_FAMILY_IPV4: _ClassVar[IpFamily]
    IP_FAMILY_IPV6: _ClassVar[IpFamily]

class IpFamilyPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    IP_FAMILY_POLICY_UNSPECIFIED: _ClassVar[IpFamilyPolicy]
    IP_FAMILY_POLICY_SINGLE_STACK: _ClassVar[IpFamilyPolicy]
    IP_FAMILY_POLICY_PREFER_DUAL_STACK: _ClassVar[IpFamilyPolicy]
    IP_FAMILY_POLICY_REQUIRE_DUAL_STACK: _ClassVar[IpFamilyPolicy]

class IpMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    IP_MODE_UNSPECIFIED: _ClassVar[IpMode]
    IP_MODE_VIP: _ClassVar[IpMode]
    IP_MODE_PROXY: _ClassVar[IpMode]
NODE_ADDRESS_TYPE_UNSPECIFIED: NodeAddressType
NODE_ADDRESS_TYPE_HOSTNAME: NodeAddressType
NODE_ADDRESS_TYPE_INTERNAL_IP: NodeAddressType
NODE_ADDRESS_TYPE_EXTERNAL_IP: NodeAddressType
NODE_ADDRESS_TYPE_INTERNAL_DNS: NodeAddressType
NODE_ADDRESS_TYPE_EXTERNAL_DNS: NodeAddressType
PROTOCOL_UNSPECIFIED: Protocol
PROTOCOL_TCP: Protocol
PROTOCOL_UDP: Protocol
PROTOCOL_SCTP: Protocol
TRAFFIC_POLICY_UNSPECIFIED: TrafficPolicy
TRAFFIC_POLICY_CLUSTER: TrafficPolicy
TRAFFIC_POLICY_LOCAL: TrafficPolicy
SESSION_AFFINITY_UNSPECIFIED: SessionAffinity
SESSION_AFFINITY_NONE: SessionAffinity
SESSION_AFFINITY_CLIENT_IP: SessionAffinity
IP_FAMILY_UNSPECIFIED: IpFamily
IP_FAMILY_IPV4: IpFamily
IP_FAMILY_IPV6: IpFamily
IP_FAMILY_POLICY_UNSPECIFIED: IpFamilyPolicy
IP_FAMILY_POLICY_SINGLE_STACK: IpFamilyPolicy
IP_FAMILY_POLICY_PREFER_DUAL_STACK: IpFamilyPolicy
IP_FAMILY_POLICY_REQUIRE_DUAL_STACK: IpFamilyPolicy
IP_MODE_UNSPECIFIED: IpMode
IP_MODE_VIP: IpMode
IP_MODE_PROXY: IpMode

class NodeAddress(_message.Message):
    __slots__ = ("type", "address")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    type: NodeAddressType
    address: str
    def __init__(self, type: _Optional[_Union[NodeAddressType, str]] = ..., address: _Optional[str] = ...) -> None: ...

class NodeRef(_message.Message):
    __slots__ = ("name", "uid", "provider_id", "addresses", "labels", "annotations")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class AnnotationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    uid: str
    provider_id: str
    addresses: _containers.RepeatedCompositeFieldContainer[NodeAddress]
    labels: _containers.ScalarMap[str, str]
    annotations: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., uid: _Optional[str] = ..., provider_id: _Optional[str] = ..., addresses: _Optional[_Iterable[_Union[NodeAddress, _Mapping]]] = ..., labels: _Optional[_Mapping[str, str]] = ..., annotations: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ServicePort(_message.Message):
    __slots__ = ("name", "protocol", "port", "node_port", "app_protocol")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    NODE_PORT_FIELD_NUMBER: _ClassVar[int]
    APP_PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    name: str
    protocol: Protocol
    port: int
    node_port: int
    app_protocol: str
    def __init__(self, name: _Optional[str] = ..., protocol: _Optional[_Union[Protocol, str]] = ..., port: _Optional[int] = ..., node_port: _Optional[int] = ..., app_protocol: _Optional[str] = ...) -> None: ...

class PortStatus(_message.Message):
    __slots__ = ("port", "protocol", "error")
    PORT_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    port: int
    protocol: Protocol
    error: str
    def __init__(self, port: _Optional[int] = ..., protocol: _Optional[_Union[Protocol, str]] = ..., error: _Optional[str] = ...) -> None: ...

class LoadBalancerIngress(_message.Message):
    __slots__ = ("ip", "hostname", "ip_mode", "ports")
    IP_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    IP_MODE_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    ip: str
    hostname: str
    ip_mode: IpMode
    ports: _containers.RepeatedCompositeFieldContainer[PortStatus]
    def __init__(self, ip: _Optional[str] = ..., hostname: _Optional[str] = ..., ip_mode: _Optional[_Union[IpMode, str]] = ..., ports: _Optional[_Iterable[_Union[PortStatus, _Mapping]]] = ...) -> None: ...

class LoadBalancerStatus(_message.Message):
    __slots__ = ("ingress",)
    INGRESS_FIELD_NUMBER: _ClassVar[int]
    ingress: _containers.RepeatedCompositeFieldContainer[LoadBalancerIngress]
    def __init__(self, ingress: _Optional[_Iterable[_Union[LoadBalancerIngress, _Mapping]]] = ...) -> None: ...

class Service(_message.Message):
    __slots__ = ("namespace", "name", "uid", "labels", "annotations", "ports", "load_balancer_class", "load_balancer_source_ranges", "external_traffic_policy", "internal_traffic_policy", "health_check_node_port", "session_affinity", "session_affinity_timeout_seconds", "ip_families", "ip_family_policy", "allocate_load_balancer_node_ports", "load_balancer_ip", "cluster_ips", "status")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class AnnotationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    LOAD_BALANCER_CLASS_FIELD_NUMBER: _ClassVar[int]
    LOAD_BALANCER_SOURCE_RANGES_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_TRAFFIC_POLICY_FIELD_NUMBER: _ClassVar[int]
    INTERNAL_TRAFFIC_POLICY_FIELD_NUMBER: _ClassVar[int]
    HEALTH_CHECK_NODE_PORT_FIELD_NUMBER: _ClassVar[int]
    SESSION_AFFINITY_FIELD_NUMBER: _ClassVar[int]
    SESSION_AFFINITY_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    IP_FAMILIES_FIELD_NUMBER: _ClassVar[int]
    IP_FAMILY_POLICY_FIELD_NUMBER: _ClassVar[int]
    ALLOCATE_LOAD_BALANCER_NODE_PORTS_FIELD_NUMBER: _ClassVar[int]
    LOAD_BALANCER_IP_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_IPS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    name: str
    uid: str
    labels: _containers.ScalarMap[str, str]
    annotations: _containers.ScalarMap[str, str]
    ports: _containers.RepeatedCompositeFieldContainer[ServicePort]
    load_balancer_class: str
    load_balancer_source_ranges: _containers.RepeatedScalarFieldContainer[str]
    external_traffic_policy: TrafficPolicy
    internal_traffic_policy: TrafficPolicy
    health_check_node_port: int
    session_affinity: SessionAffinity
    session_affinity_timeout_seconds: int
    ip_families: _containers.RepeatedScalarFieldContainer[IpFamily]
    ip_family_policy: IpFamilyPolicy
    allocate_load_balancer_node_ports: bool
    load_balancer_ip: str
    cluster_ips: _containers.RepeatedScalarFieldContainer[str]
    status: LoadBalancerStatus
    def __init__(self, namespace: _Optional[str] = ..., name: _Optional[str] = ..., uid: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., annotations: _Optional[_Mapping[str, str]] = ..., ports: _Optional[_Iterable[_Union[ServicePort, _Mapping]]] = ..., load_balancer_class: _Optional[str] = ..., load_balancer_source_ranges: _Optional[_Iterable[str]] = ..., external_traffic_policy: _Optional[_Union[TrafficPolicy, str]] = ..., internal_traffic_policy: _Optional[_Union[TrafficPolicy, str]] = ..., health_check_node_port: _Optional[int] = ..., session_affinity: _Optional[_Union[SessionAffinity, str]] = ..., session_affinity_timeout_seconds: _Optional[int] = ..., ip_families: _Optional[_Iterable[_Union[IpFamily, str]]] = ..., ip_family_policy: _Optional[_Union[IpFamilyPolicy, str]] = ..., allocate_load_balancer_node_ports: _Optional[bool] = ..., load_balancer_ip: _Optional[str] = ..., cluster_ips: _Optional[_Iterable[str]] = ..., status: _Optional[_Union[LoadBalancerStatus, _Mapping]] = ...) -> None: ...

class Warning(_message.Message):
    __slots__ = ("reason", "message")
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    reason: str
    message: str
    def __init__(self, reason: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...
