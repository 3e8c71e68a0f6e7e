"""BatchInstances (contract 1.4.0): served for every provider with
Instances, natively through ``batch_instances`` or by fan-out over the
single methods, each query answered as its single call."""

from __future__ import annotations

import threading

import grpc
import pytest
from conftest import channel

from ccmrs.cloudprovider.v1 import identity_pb2_grpc, instances_pb2_grpc
from ccmrs_provider import (
    Existence,
    Identity,
    Instances,
    ProviderError,
    ProviderInfo,
    ProviderServer,
    ShutdownState,
    pb,
    validate,
)
from ccmrs_provider.adapters import BATCH_CONCURRENCY

EXISTS, SHUTDOWN, METADATA = (
    pb.INSTANCE_QUESTION_EXISTENCE,
    pb.INSTANCE_QUESTION_SHUTDOWN,
    pb.INSTANCE_QUESTION_METADATA,
)


def query(key: str, provider_id: str, question: int, name: str = "n") -> pb.InstanceQuery:
    return pb.InstanceQuery(
        key=key, node=pb.NodeRef(name=name, provider_id=provider_id), question=question
    )


class Singles(Identity, Instances):
    """Answers by providerID: ``test://run`` runs, ``test://off`` is shut
    down, ``test://gone`` is gone, ``test://bad`` has invalid metadata,
    ``test://boom`` raises, ``test://slow`` waits for ``release``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight = self.most = self.calls = 0
        self.release = threading.Event()

    def info(self) -> ProviderInfo:
        return ProviderInfo(name="test", vendor_version="1.0.0", provider_id_scheme="test")

    def _enter(self, node: pb.NodeRef) -> None:
        with self.lock:
            self.calls += 1
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        try:
            if node.provider_id == "test://slow":
                assert self.release.wait(10)
            if node.provider_id == "test://boom":
                raise RuntimeError("cloud SDK bug")
            if node.provider_id == "test://gone":
                raise ProviderError.instance_not_found(f"no {node.name}")
            if node.provider_id == "test://throttled":
                raise ProviderError.cloud_unavailable("throttled", retry_after=1.5)
        finally:
            with self.lock:
                self.in_flight -= 1

    def instance_exists(self, ctx, node):
        if node.provider_id == "test://gone":
            return Existence.NOT_EXISTS
        self._enter(node)
        return True

    def instance_shutdown(self, ctx, node):
        self._enter(node)
        return (
            ShutdownState.SHUT_DOWN if node.provider_id == "test://off" else ShutdownState.RUNNING
        )

    def instance_metadata(self, ctx, node):
        self._enter(node)
        if node.provider_id == "test://bad":
            return pb.InstanceMetadata(zone="not a label!")
        ctx.warn("Maintenance", f"{node.name} is due for maintenance")
        return pb.InstanceMetadata(instance_type="m5", provider_id=node.provider_id)


class Native(Singles):
    """The same answers, in one batch_instances call per batch."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[str]] = []
        self.override = None

    def batch_instances(self, ctx, queries):
        self.batches.append([q.node.provider_id for q in queries])
        if self.override is not None:
            return self.override(queries)
        answers = {}
        for q in queries:
            try:
                if q.question == EXISTS:
                    answers[q.key] = self.instance_exists(ctx, q.node)
                elif q.question == SHUTDOWN:
                    answers[q.key] = self.instance_shutdown(ctx, q.node)
                else:
                    md = self.instance_metadata(ctx, q.node)
                    answers[q.key] = pb.InstanceMetadataResponse(
                        metadata=md, warnings=[pb.Warning(reason="Maintenance", message="due")]
                    )
            except ProviderError as e:
                answers[q.key] = e
            except RuntimeError as e:
                answers[q.key] = ProviderError.internal(f"provider failed: {e}")
        return answers


def serve(provider: Singles, endpoint: str):
    return ProviderServer(provider).with_instances(provider).start(endpoint)


def every_query() -> list[pb.InstanceQuery]:
    ids = ["test://run", "test://off", "test://gone", "test://bad", "test://throttled"]
    ids += ["test://boom", "aws:///i-1"]
    qs = [query(f"{i}/{q}", i, q) for i in ids for q in (EXISTS, SHUTDOWN, METADATA)]
    return [*qs, pb.InstanceQuery(key="no node", question=METADATA)]


def single(stub, q: pb.InstanceQuery) -> pb.InstanceResult:
    """What the single call answers for ``q``, as a result."""
    node = {"node": q.node} if q.HasField("node") else {}
    try:
        if q.question == EXISTS:
            r = stub.InstanceExists(pb.InstanceExistsRequest(**node))
            return pb.InstanceResult(key=q.key, existence=r)
        if q.question == SHUTDOWN:
            r = stub.InstanceShutdown(pb.InstanceShutdownRequest(**node))
            return pb.InstanceResult(key=q.key, shutdown=r)
        r = stub.InstanceMetadata(pb.InstanceMetadataRequest(**node))
        return pb.InstanceResult(key=q.key, metadata=r)
    except grpc.RpcError as e:
        return pb.InstanceResult(key=q.key, error=ProviderError.from_rpc_error(e).to_query_error())


def same(a: pb.InstanceResult, b: pb.InstanceResult) -> bool:
    """The same answer, or errors of the same code, reason, field and retry
    delay (the messages carry the request id)."""
    if a.HasField("error") and b.HasField("error"):
        ea, eb = a.error, b.error
        return (ea.code, ea.reason, ea.field, ea.retry_delay_ms) == (
            eb.code,
            eb.reason,
            eb.field,
            eb.retry_delay_ms,
        )
    return a == b


@pytest.mark.parametrize(
    ("queries", "field"),
    [
        ([query("a", "test://x", EXISTS)], None),
        ([query(str(i), "test://x", EXISTS) for i in range(500)], None),
        ([], "queries"),
        ([query(str(i), "test://x", EXISTS) for i in range(501)], "queries"),
        ([query("a", "test://x", EXISTS), query("", "test://x", EXISTS)], "queries[1].key"),
        ([query("k" * 254, "test://x", EXISTS)], "queries[0].key"),
        ([query("k" * 253, "test://x", EXISTS)], None),
        ([query("a", "test://x", EXISTS), query("a", "test://y", SHUTDOWN)], "queries[1].key"),
        ([query("a", "test://x", 0)], "queries[0].question"),
        ([query("a", "test://x", 7)], "queries[0].question"),
        # A bad node fails only its query.
        ([pb.InstanceQuery(key="a", question=EXISTS)], None),
    ],
)
def test_requests_are_checked_naming_the_field(queries, field) -> None:
    request = pb.BatchInstancesRequest(queries=queries)
    if field is None:
        validate.batch_instances_request(request)
        return
    with pytest.raises(validate.Violation) as v:
        validate.batch_instances_request(request)
    assert v.value.field == field


def test_query_errors_carry_what_the_single_call_sends() -> None:
    e = ProviderError.invalid_request("node.provider_id", "not ours").to_query_error()
    assert (e.code, e.reason, e.field) == (
        grpc.StatusCode.INVALID_ARGUMENT.value[0],
        pb.ERROR_REASON_INVALID_REQUEST,
        "node.provider_id",
    )
    e = ProviderError.retry_after("later", 0.0015).to_query_error()
    assert (e.code, e.reason, e.retry_delay_ms) == (14, pb.ERROR_REASON_RETRY_AFTER, 2)
    e = ProviderError.internal("x" * 10_000).to_query_error()
    assert (e.code, e.reason, e.retry_delay_ms) == (13, 0, 0) and len(e.message) <= 4096


@pytest.mark.parametrize("provider", [Singles, Native])
def test_a_batch_answers_each_query_as_its_single_call(provider, endpoint: str) -> None:
    p = provider()
    with serve(p, endpoint), channel(endpoint) as ch:
        caps = identity_pb2_grpc.IdentityServiceStub(ch).GetProviderCapabilities(
            pb.GetProviderCapabilitiesRequest()
        )
        assert list(caps.capabilities) == [pb.CAPABILITY_INSTANCES, pb.CAPABILITY_INSTANCES_BATCH]
        stub = instances_pb2_grpc.InstancesServiceStub(ch)
        queries = every_query()
        results = stub.BatchInstances(pb.BatchInstancesRequest(queries=queries)).results
        assert [r.key for r in results] == [q.key for q in queries]
        for q, r in zip(queries, results, strict=True):
            want = single(stub, q)
            if provider is Native and r.HasField("metadata"):
                # The native batch says its own warnings.
                del want.metadata.warnings[:]
                del r.metadata.warnings[:]
            assert same(r, want), (q.key, r, want)
        by_key = {r.key: r for r in results}
        assert by_key["test://gone/1"].existence.existence == pb.INSTANCE_EXISTENCE_NOT_EXISTS
        assert by_key["test://gone/3"].error.reason == pb.ERROR_REASON_INSTANCE_NOT_FOUND
        assert by_key["test://bad/3"].error.code == grpc.StatusCode.INTERNAL.value[0]
        assert by_key["test://boom/2"].error.code == grpc.StatusCode.INTERNAL.value[0]
        assert by_key["test://throttled/2"].error.retry_delay_ms == 1500
        assert by_key["aws:///i-1/1"].error.field == "node.provider_id"
        assert by_key["no node"].error.field == "node"
        if provider is Singles:
            warnings = by_key["test://run/3"].metadata.warnings
            assert [w.message for w in warnings] == ["n is due for maintenance"]
        else:
            # One call, without the foreign node and the one without a node.
            assert len(p.batches) == 1 and "aws:///i-1" not in p.batches[0]
            assert len(p.batches[0]) == 6 * 3


def test_the_fan_out_makes_16_calls_at_once(endpoint: str) -> None:
    p = Singles()
    with serve(p, endpoint), channel(endpoint) as ch:
        stub = instances_pb2_grpc.InstancesServiceStub(ch)
        queries = [query(f"q{i}", "test://slow", SHUTDOWN) for i in range(40)]
        future = stub.BatchInstances.future(pb.BatchInstancesRequest(queries=queries))
        deadline = threading.Event()
        for _ in range(1000):
            if p.in_flight >= BATCH_CONCURRENCY:
                break
            deadline.wait(0.01)
        assert p.in_flight == BATCH_CONCURRENCY
        p.release.set()
        results = future.result(timeout=10).results
        assert p.most == BATCH_CONCURRENCY
        assert all(r.shutdown.state == pb.INSTANCE_SHUTDOWN_STATE_RUNNING for r in results)


def test_a_bad_native_answer_fails_only_its_query(endpoint: str) -> None:
    p = Native()
    p.override = lambda qs: {
        "a": Existence.EXISTS,
        "b": ShutdownState.RUNNING,  # the wrong kind
        # "c": missing
        "d": pb.InstanceMetadata(zone="z1"),
        "e": "what?",
        "x": Existence.EXISTS,  # not asked: dropped
    }
    queries = [
        query("a", "test://run", EXISTS),
        query("b", "test://run", EXISTS),
        query("c", "test://run", SHUTDOWN),
        query("d", "test://run", METADATA),
        query("e", "test://run", METADATA),
    ]
    with serve(p, endpoint), channel(endpoint) as ch:
        stub = instances_pb2_grpc.InstancesServiceStub(ch)
        results = stub.BatchInstances(pb.BatchInstancesRequest(queries=queries)).results
    internal = grpc.StatusCode.INTERNAL.value[0]
    assert [r.key for r in results] == ["a", "b", "c", "d", "e"]
    assert results[0].existence.existence == pb.INSTANCE_EXISTENCE_EXISTS
    assert results[1].error.code == internal and results[2].error.code == internal
    assert "no result" in results[2].error.message
    # Metadata without a providerID keeps the Node's (the controller's rule).
    assert results[3].metadata.metadata.zone == "z1"
    assert results[4].error.code == internal


def test_whole_call_failures(endpoint: str) -> None:
    p = Native()

    def down(qs):
        raise ProviderError.cloud_unavailable("EC2 down", retry_after=2)

    p.override = down
    with serve(p, endpoint), channel(endpoint) as ch:
        stub = instances_pb2_grpc.InstancesServiceStub(ch)
        with pytest.raises(grpc.RpcError) as e:
            stub.BatchInstances(pb.BatchInstancesRequest(queries=[query("a", "test://x", EXISTS)]))
        err = ProviderError.from_rpc_error(e.value)
        assert (err.reason, err.retry_after) == ("CLOUD_UNAVAILABLE", 2)
        # A malformed request reaches no provider code.
        with pytest.raises(grpc.RpcError) as e:
            stub.BatchInstances(
                pb.BatchInstancesRequest(
                    queries=[query("a", "test://x", EXISTS), query("a", "test://x", METADATA)]
                )
            )
        err = ProviderError.from_rpc_error(e.value)
        assert err.reason == "INVALID_REQUEST" and err.field_violations[0][0] == "queries[1].key"
        assert len(p.batches) == 1
        # Queries refused before the provider keep their errors.
        results = stub.BatchInstances(
            pb.BatchInstancesRequest(
                queries=[query("a", "aws:///i-1", EXISTS), query("b", "test://x", EXISTS)]
            )
        ).results
        assert results[0].error.field == "node.provider_id"
        assert results[1].error.reason == pb.ERROR_REASON_CLOUD_UNAVAILABLE
        assert results[1].error.retry_delay_ms == 2000 and len(p.batches) == 2
        # Only foreign nodes: the provider is not asked.
        results = stub.BatchInstances(
            pb.BatchInstancesRequest(queries=[query("a", "aws:///i-1", EXISTS)])
        ).results
        assert results[0].error.field == "node.provider_id" and len(p.batches) == 2
