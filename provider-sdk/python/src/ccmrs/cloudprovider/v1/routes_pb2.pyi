from ccmrs.cloudprovider.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Route(_message.Message):
    __slots__ = ("name", "target_node", "target_node_addresses", "destination_cidr", "blackhole")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TARGET_NODE_FIELD_NUMBER: _ClassVar[int]
    TARGET_NODE_ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_CIDR_FIELD_NUMBER: _ClassVar[int]
    BLACKHOLE_FIELD_NUMBER: _ClassVar[int]
    name: str
    target_node: str
    target_node_addresses: _containers.RepeatedCompositeFieldContainer[_types_pb2.NodeAddress]
    destination_cidr: str
    blackhole: bool
    def __init__(self, name: _Optional[str] = ..., target_node: _Optional[str] = ..., target_node_addresses: _Optional[_Iterable[_Union[_types_pb2.NodeAddress, _Mapping]]] = ..., destination_cidr: _Optional[str] = ..., blackhole: _Optional[bool] = ...) -> None: ...

class ListRoutesRequest(_message.Message):
    __slots__ = ("cluster_name", "page_size", "page_token")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    page_size: int
    page_token: str
    def __init__(self, cluster_name: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListRoutesResponse(_message.Message):
    __slots__ = ("routes", "next_page_token")
    ROUTES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    routes: _containers.RepeatedCompositeFieldContainer[Route]
    next_page_token: str
    def __init__(self, routes: _Optional[_Iterable[_Union[Route, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CreateRouteRequest(_message.Message):
    __slots__ = ("cluster_name", "name_hint", "route")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    NAME_HINT_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    name_hint: str
    route: Route
    def __init__(self, cluster_name: _Optional[str] = ..., name_hint: _Optional[str] = ..., route: _Optional[_Union[Route, _Mapping]] = ...) -> None: ...

class CreateRouteResponse(_message.Message):
    __slots__ = ("route",)
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    route: Route
    def __init__(self, route: _Optional[_Union[Route, _Mapping]] = ...) -> None: ...

class DeleteRouteRequest(_message.Message):
    __slots__ = ("cluster_name", "route")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    route: Route
    def __init__(self, cluster_name: _Optional[str] = ..., route: _Optional[_Union[Route, _Mapping]] = ...) -> None: ...

class DeleteRouteResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
