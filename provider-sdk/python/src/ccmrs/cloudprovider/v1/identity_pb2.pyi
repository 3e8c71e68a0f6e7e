from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class UnclassedServices(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UNCLASSED_SERVICES_UNSPECIFIED: _ClassVar[UnclassedServices]
    UNCLASSED_SERVICES_SERVED: _ClassVar[UnclassedServices]
    UNCLASSED_SERVICES_DECLINED: _ClassVar[UnclassedServices]

class Capability(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CAPABILITY_UNSPECIFIED: _ClassVar[Capability]
    CAPABILITY_INSTANCES: _ClassVar[Capability]
    CAPABILITY_LOAD_BALANCERS: _ClassVar[Capability]
    CAPABILITY_LIST_LOAD_BALANCERS: _ClassVar[Capability]
    CAPABILITY_ROUTES: _ClassVar[Capability]
    CAPABILITY_ROUTES_TARGET_NODE_ADDRESSES: _ClassVar[Capability]
    CAPABILITY_ZONES: _ClassVar[Capability]
    CAPABILITY_CLUSTERS: _ClassVar[Capability]
    CAPABILITY_VOLUME_LABELS: _ClassVar[Capability]
    CAPABILITY_NODE_SETS: _ClassVar[Capability]
    CAPABILITY_INSTANCES_BATCH: _ClassVar[Capability]

class ProbeState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROBE_STATE_UNSPECIFIED: _ClassVar[ProbeState]
    PROBE_STATE_NOT_READY: _ClassVar[ProbeState]
    PROBE_STATE_STARTING: _ClassVar[ProbeState]
    PROBE_STATE_READY: _ClassVar[ProbeState]
UNCLASSED_SERVICES_UNSPECIFIED: UnclassedServices
UNCLASSED_SERVICES_SERVED: UnclassedServices
UNCLASSED_SERVICES_DECLINED: UnclassedServices
CAPABILITY_UNSPECIFIED: Capability
CAPABILITY_INSTANCES: Capability
CAPABILITY_LOAD_BALANCERS: Capability
CAPABILITY_LIST_LOAD_BALANCERS: Capability
CAPABILITY_ROUTES: Capability
CAPABILITY_ROUTES_TARGET_NODE_ADDRESSES: Capability
CAPABILITY_ZONES: Capability
CAPABILITY_CLUSTERS: Capability
CAPABILITY_VOLUME_LABELS: Capability
CAPABILITY_NODE_SETS: Capability
CAPABILITY_INSTANCES_BATCH: Capability
PROBE_STATE_UNSPECIFIED: ProbeState
PROBE_STATE_NOT_READY: ProbeState
PROBE_STATE_STARTING: ProbeState
PROBE_STATE_READY: ProbeState

class GetProviderInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetProviderInfoResponse(_message.Message):
    __slots__ = ("name", "vendor_version", "provider_id_scheme", "contract_version", "has_cluster_id", "manifest", "provider_id_schemes", "load_balancer_classes", "unclassed_services", "platforms")
    class ManifestEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    VENDOR_VERSION_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_ID_SCHEME_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_VERSION_FIELD_NUMBER: _ClassVar[int]
    HAS_CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_ID_SCHEMES_FIELD_NUMBER: _ClassVar[int]
    LOAD_BALANCER_CLASSES_FIELD_NUMBER: _ClassVar[int]
    UNCLASSED_SERVICES_FIELD_NUMBER: _ClassVar[int]
    PLATFORMS_FIELD_NUMBER: _ClassVar[int]
    name: str
    vendor_version: str
    provider_id_scheme: str
    contract_version: str
    has_cluster_id: bool
    manifest: _containers.ScalarMap[str, str]
    provider_id_schemes: _containers.RepeatedScalarFieldContainer[str]
    load_balancer_classes: _containers.RepeatedScalarFieldContainer[str]
    unclassed_services: UnclassedServices
    platforms: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., vendor_version: _Optional[str] = ..., provider_id_scheme: _Optional[str] = ..., contract_version: _Optional[str] = ..., has_cluster_id: _Optional[bool] = ..., manifest: _Optional[_Mapping[str, str]] = ..., provider_id_schemes: _Optional[_Iterable[str]] = ..., load_balancer_classes: _Optional[_Iterable[str]] = ..., unclassed_services: _Optional[_Union[UnclassedServices, str]] = ..., platforms: _Optional[_Iterable[str]] = ...) -> None: ...

class GetProviderCapabilitiesRequest(_message.Message):
    __slots__ = ("controller_version",)
    CONTROLLER_VERSION_FIELD_NUMBER: _ClassVar[int]
    controller_version: str
    def __init__(self, controller_version: _Optional[str] = ...) -> None: ...

class GetProviderCapabilitiesResponse(_message.Message):
    __slots__ = ("capabilities", "annotations")
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    capabilities: _containers.RepeatedScalarFieldContainer[Capability]
    annotations: AnnotationSchema
    def __init__(self, capabilities: _Optional[_Iterable[_Union[Capability, str]]] = ..., annotations: _Optional[_Union[AnnotationSchema, _Mapping]] = ...) -> None: ...

class AnnotationSchema(_message.Message):
    __slots__ = ("prefixes", "known_keys", "descriptions")
    PREFIXES_FIELD_NUMBER: _ClassVar[int]
    KNOWN_KEYS_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    prefixes: _containers.RepeatedScalarFieldContainer[str]
    known_keys: _containers.RepeatedScalarFieldContainer[str]
    descriptions: _containers.RepeatedCompositeFieldContainer[AnnotationDescription]
    def __init__(self, prefixes: _Optional[_Iterable[str]] = ..., known_keys: _Optional[_Iterable[str]] = ..., descriptions: _Optional[_Iterable[_Union[AnnotationDescription, _Mapping]]] = ...) -> None: ...

class AnnotationDescription(_message.Message):
    __slots__ = ("key", "description", "value_type", "default_value", "example")
    KEY_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    VALUE_TYPE_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_VALUE_FIELD_NUMBER: _ClassVar[int]
    EXAMPLE_FIELD_NUMBER: _ClassVar[int]
    key: str
    description: str
    value_type: str
    default_value: str
    example: str
    def __init__(self, key: _Optional[str] = ..., description: _Optional[str] = ..., value_type: _Optional[str] = ..., default_value: _Optional[str] = ..., example: _Optional[str] = ...) -> None: ...

class ProbeRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ProbeResponse(_message.Message):
    __slots__ = ("state", "message")
    STATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    state: ProbeState
    message: str
    def __init__(self, state: _Optional[_Union[ProbeState, str]] = ..., message: _Optional[str] = ...) -> None: ...
