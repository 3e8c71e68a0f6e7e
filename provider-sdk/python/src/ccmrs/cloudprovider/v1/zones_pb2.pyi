from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Zone(_message.Message):
    __slots__ = ("failure_domain", "region")
    FAILURE_DOMAIN_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    failure_domain: str
    region: str
    def __init__(self, failure_domain: _Optional[str] = ..., region: _Optional[str] = ...) -> None: ...

class GetZoneByProviderIdRequest(_message.Message):
    __slots__ = ("provider_id",)
    PROVIDER_ID_FIELD_NUMBER: _ClassVar[int]
    provider_id: str
    def __init__(self, provider_id: _Optional[str] = ...) -> None: ...

class GetZoneByProviderIdResponse(_message.Message):
    __slots__ = ("zone",)
    ZONE_FIELD_NUMBER: _ClassVar[int]
    zone: Zone
    def __init__(self, zone: _Optional[_Union[Zone, _Mapping]] = ...) -> None: ...

class GetZoneByNodeNameRequest(_message.Message):
    __slots__ = ("node_name",)
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    node_name: str
    def __init__(self, node_name: _Optional[str] = ...) -> None: ...

class GetZoneByNodeNameResponse(_message.Message):
    __slots__ = ("zone",)
    ZONE_FIELD_NUMBER: _ClassVar[int]
    zone: Zone
    def __init__(self, zone: _Optional[_Union[Zone, _Mapping]] = ...) -> None: ...
