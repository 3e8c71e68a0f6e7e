from ccmrs.cloudprovider.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LoadBalancerExistence(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOAD_BALANCER_EXISTENCE_UNSPECIFIED: _ClassVar[LoadBalancerExistence]
    LOAD_BALANCER_EXISTENCE_EXISTS: _ClassVar[LoadBalancerExistence]
    LOAD_BALANCER_EXISTENCE_NOT_EXISTS: _ClassVar[LoadBalancerExistence]
LOAD_BALANCER_EXISTENCE_UNSPECIFIED: LoadBalancerExistence
LOAD_BALANCER_EXISTENCE_EXISTS: LoadBalancerExistence
LOAD_BALANCER_EXISTENCE_NOT_EXISTS: LoadBalancerExistence

class GetLoadBalancerRequest(_message.Message):
    __slots__ = ("cluster_name", "service")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    service: _types_pb2.Service
    def __init__(self, cluster_name: _Optional[str] = ..., service: _Optional[_Union[_types_pb2.Service, _Mapping]] = ...) -> None: ...

class GetLoadBalancerResponse(_message.Message):
    __slots__ = ("existence", "status")
    EXISTENCE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    existence: LoadBalancerExistence
    status: _types_pb2.LoadBalancerStatus
    def __init__(self, existence: _Optional[_Union[LoadBalancerExistence, str]] = ..., status: _Optional[_Union[_types_pb2.LoadBalancerStatus, _Mapping]] = ...) -> None: ...

class GetLoadBalancerNameRequest(_message.Message):
    __slots__ = ("cluster_name", "service")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    service: _types_pb2.Service
    def __init__(self, cluster_name: _Optional[str] = ..., service: _Optional[_Union[_types_pb2.Service, _Mapping]] = ...) -> None: ...

class GetLoadBalancerNameResponse(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class EnsureLoadBalancerRequest(_message.Message):
    __slots__ = ("cluster_name", "service", "nodes", "node_set_id")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    NODE_SET_ID_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    service: _types_pb2.Service
    nodes: _containers.RepeatedCompositeFieldContainer[_types_pb2.NodeRef]
    node_set_id: str
    def __init__(self, cluster_name: _Optional[str] = ..., service: _Optional[_Union[_types_pb2.Service, _Mapping]] = ..., nodes: _Optional[_Iterable[_Union[_types_pb2.NodeRef, _Mapping]]] = ..., node_set_id: _Optional[str] = ...) -> None: ...

class ImplementedElsewhere(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: str
    def __init__(self, message: _Optional[str] = ...) -> None: ...

class EnsureLoadBalancerResponse(_message.Message):
    __slots__ = ("status", "implemented_elsewhere", "warnings")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    IMPLEMENTED_ELSEWHERE_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    status: _types_pb2.LoadBalancerStatus
    implemented_elsewhere: ImplementedElsewhere
    warnings: _containers.RepeatedCompositeFieldContainer[_types_pb2.Warning]
    def __init__(self, status: _Optional[_Union[_types_pb2.LoadBalancerStatus, _Mapping]] = ..., implemented_elsewhere: _Optional[_Union[ImplementedElsewhere, _Mapping]] = ..., warnings: _Optional[_Iterable[_Union[_types_pb2.Warning, _Mapping]]] = ...) -> None: ...

class UpdateLoadBalancerRequest(_message.Message):
    __slots__ = ("cluster_name", "service", "nodes", "node_set_id")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    NODE_SET_ID_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    service: _types_pb2.Service
    nodes: _containers.RepeatedCompositeFieldContainer[_types_pb2.NodeRef]
    node_set_id: str
    def __init__(self, cluster_name: _Optional[str] = ..., service: _Optional[_Union[_types_pb2.Service, _Mapping]] = ..., nodes: _Optional[_Iterable[_Union[_types_pb2.NodeRef, _Mapping]]] = ..., node_set_id: _Optional[str] = ...) -> None: ...

class LoadBalancerUpdated(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UpdateLoadBalancerResponse(_message.Message):
    __slots__ = ("updated", "implemented_elsewhere", "warnings")
    UPDATED_FIELD_NUMBER: _ClassVar[int]
    IMPLEMENTED_ELSEWHERE_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    updated: LoadBalancerUpdated
    implemented_elsewhere: ImplementedElsewhere
    warnings: _containers.RepeatedCompositeFieldContainer[_types_pb2.Warning]
    def __init__(self, updated: _Optional[_Union[LoadBalancerUpdated, _Mapping]] = ..., implemented_elsewhere: _Optional[_Union[ImplementedElsewhere, _Mapping]] = ..., warnings: _Optional[_Iterable[_Union[_types_pb2.Warning, _Mapping]]] = ...) -> None: ...

class EnsureLoadBalancerDeletedRequest(_message.Message):
    __slots__ = ("cluster_name", "service")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    service: _types_pb2.Service
    def __init__(self, cluster_name: _Optional[str] = ..., service: _Optional[_Union[_types_pb2.Service, _Mapping]] = ...) -> None: ...

class EnsureLoadBalancerDeletedResponse(_message.Message):
    __slots__ = ("warnings",)
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    warnings: _containers.RepeatedCompositeFieldContainer[_types_pb2.Warning]
    def __init__(self, warnings: _Optional[_Iterable[_Union[_types_pb2.Warning, _Mapping]]] = ...) -> None: ...

class ListLoadBalancersRequest(_message.Message):
    __slots__ = ("cluster_name", "page_size", "page_token")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    page_size: int
    page_token: str
    def __init__(self, cluster_name: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class LoadBalancerSummary(_message.Message):
    __slots__ = ("name", "service_uid", "service_namespace", "service_name", "status")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SERVICE_UID_FIELD_NUMBER: _ClassVar[int]
    SERVICE_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    SERVICE_NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    name: str
    service_uid: str
    service_namespace: str
    service_name: str
    status: _types_pb2.LoadBalancerStatus
    def __init__(self, name: _Optional[str] = ..., service_uid: _Optional[str] = ..., service_namespace: _Optional[str] = ..., service_name: _Optional[str] = ..., status: _Optional[_Union[_types_pb2.LoadBalancerStatus, _Mapping]] = ...) -> None: ...

class ListLoadBalancersResponse(_message.Message):
    __slots__ = ("load_balancers", "next_page_token")
    LOAD_BALANCERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    load_balancers: _containers.RepeatedCompositeFieldContainer[LoadBalancerSummary]
    next_page_token: str
    def __init__(self, load_balancers: _Optional[_Iterable[_Union[LoadBalancerSummary, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class PutNodeSetRequest(_message.Message):
    __slots__ = ("cluster_name", "node_set_id", "nodes")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    NODE_SET_ID_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    node_set_id: str
    nodes: _containers.RepeatedCompositeFieldContainer[_types_pb2.NodeRef]
    def __init__(self, cluster_name: _Optional[str] = ..., node_set_id: _Optional[str] = ..., nodes: _Optional[_Iterable[_Union[_types_pb2.NodeRef, _Mapping]]] = ...) -> None: ...

class PutNodeSetResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
