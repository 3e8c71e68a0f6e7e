import datetime

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from ccmrs.cloudprovider.v1 import errors_pb2
from ccmrs_provider import ERROR_DOMAIN, MAX_ERROR_TEXT_BYTES, FencingToken, ProviderError, Reason
from ccmrs_provider.errors import bounded, reason_name

CASES = [
    ProviderError.instance_not_found("i-1 is gone"),
    ProviderError.instance_not_found("i-1 is gone", resource_type="instance", resource_name="i-1"),
    ProviderError.retry_after("provisioning", 1.5),
    ProviderError.retry_after("provisioning", datetime.timedelta(milliseconds=250)),
    ProviderError.invalid_service_spec("spec.ports[0].protocol", "SCTP unsupported"),
    ProviderError.invalid_annotation("example.com/lb-type", "must be nlb or alb"),
    ProviderError.quota_exceeded("no more LBs"),
    ProviderError.quota_exceeded("no more LBs", violations=[("project:p", "10 of 10 used")]),
    ProviderError.conflicting_resource("cidr routed elsewhere"),
    ProviderError.conflicting_resource("taken", code=grpc.StatusCode.FAILED_PRECONDITION),
    ProviderError.operation_pending("busy"),
    ProviderError.cloud_unavailable("throttled", 2),
    ProviderError.cloud_unavailable("down"),
    ProviderError.credentials_invalid("expired"),
    ProviderError.credentials_invalid("no token", code=grpc.StatusCode.UNAUTHENTICATED),
    ProviderError.invalid_request("node.name", "is required"),
    ProviderError.not_leader(FencingToken(9, "cp-2_beef")),
    ProviderError.node_set_unknown("sha256-00"),
    ProviderError.not_found("no load balancer to update"),
    ProviderError.internal("bug"),
    ProviderError.unimplemented("nope"),
]


def same(a: ProviderError, b: ProviderError) -> bool:
    return (
        a.code,
        a.reason,
        a.message,
        a.retry_after,
        a.field_violations,
        a.newest_leader,
        a.resource,
        a.quota_violations,
    ) == (
        b.code,
        b.reason,
        b.message,
        b.retry_after,
        b.field_violations,
        b.newest_leader,
        b.resource,
        b.quota_violations,
    )


@pytest.mark.parametrize("error", CASES, ids=repr)
def test_every_constructor_round_trips_through_a_status(error: ProviderError) -> None:
    back = ProviderError.from_rpc_status(
        status_pb2.Status.FromString(error.to_rpc_status().SerializeToString())
    )
    assert same(back, error)
    grpc_status = error.to_grpc_status()
    assert grpc_status.code == error.code
    assert grpc_status.trailing_metadata[0][0] == "grpc-status-details-bin"


def test_every_reason_has_a_constructor_with_the_documented_code() -> None:
    by_reason = {e.reason: e.code for e in CASES if e.reason}
    names = {reason_name(v) for v in errors_pb2.ErrorReason.values() if v != 0}
    assert names == set(by_reason)
    assert {n for n in vars(Reason) if not n.startswith("_")} == names
    assert by_reason[Reason.RETRY_AFTER] == grpc.StatusCode.UNAVAILABLE
    assert by_reason[Reason.NOT_LEADER] == grpc.StatusCode.FAILED_PRECONDITION
    assert by_reason[Reason.INSTANCE_NOT_FOUND] == grpc.StatusCode.NOT_FOUND


def test_error_info_retry_info_and_bad_request_details() -> None:
    status = ProviderError.retry_after("later", 1.25).to_rpc_status()
    info = error_details_pb2.ErrorInfo()
    retry = error_details_pb2.RetryInfo()
    assert status.details[0].Unpack(info) and status.details[1].Unpack(retry)
    assert (info.domain, info.reason) == (ERROR_DOMAIN, "RETRY_AFTER")
    assert retry.retry_delay.ToMilliseconds() == 1250

    status = ProviderError.invalid_annotation("example.com/x", "bad").to_rpc_status()
    bad = error_details_pb2.BadRequest()
    assert status.details[1].Unpack(bad)
    assert bad.field_violations[0].field == "metadata.annotations[example.com/x]"

    status = ProviderError.not_leader(FencingToken(7, "cp-1")).to_rpc_status()
    assert status.details[0].Unpack(info)
    assert dict(info.metadata) == {"term": "7", "holder": "cp-1"}


def test_foreign_domains_and_unknown_reasons_keep_only_the_code() -> None:
    for domain, reason in [("example.com", "INSTANCE_NOT_FOUND"), (ERROR_DOMAIN, "NEW_THING")]:
        status = status_pb2.Status(code=grpc.StatusCode.NOT_FOUND.value[0], message="x")
        status.details.add().Pack(error_details_pb2.ErrorInfo(reason=reason, domain=domain))
        e = ProviderError.from_rpc_status(status)
        assert e.code == grpc.StatusCode.NOT_FOUND
        assert e.reason is None


def test_codes_the_contract_does_not_allow_are_refused() -> None:
    with pytest.raises(ValueError):
        ProviderError.conflicting_resource("x", code=grpc.StatusCode.INTERNAL)
    with pytest.raises(ValueError):
        ProviderError.credentials_invalid("x", code=grpc.StatusCode.NOT_FOUND)
    with pytest.raises(ValueError):
        ProviderError.retry_after("x", -1)


def test_long_texts_are_cut_at_a_character_boundary() -> None:
    huge = "é" * 100_000
    e = ProviderError.invalid_annotation("example.com/x", huge)
    status = e.to_rpc_status()
    assert len(status.message.encode()) <= MAX_ERROR_TEXT_BYTES
    back = ProviderError.from_rpc_status(status)
    assert back.reason == Reason.INVALID_ANNOTATION
    description = back.field_violations[0][1]
    assert len(description.encode()) <= MAX_ERROR_TEXT_BYTES
    assert description.endswith("(200000 bytes, cut)")
    assert bounded("short") == "short"


def test_str_is_the_bare_message() -> None:
    assert str(ProviderError.internal("boom")) == "boom"
    assert str(ProviderError(grpc.StatusCode.INTERNAL, None, "")) == "INTERNAL"


def test_not_found_has_the_code_and_no_reason() -> None:
    e = ProviderError.not_found("no load balancer to update")
    assert (e.code, e.reason) == (grpc.StatusCode.NOT_FOUND, None)
    status = e.to_rpc_status()
    assert status.code == grpc.StatusCode.NOT_FOUND.value[0]
    assert not status.details, "NOT_FOUND without a reason carries no ErrorInfo"
