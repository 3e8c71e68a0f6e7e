"""What every contract call goes through, whichever service it belongs to:
its :class:`CallContext` read from the metadata (request id, deadline,
fencing token, trace id), the provider method run on the event loop or a
thread, anything raised turned into the contract's statuses, and the
provider's answer checked before it is sent.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
import itertools
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from . import validate
from .errors import ProviderError
from .fencing import FENCING_TOKEN_METADATA, FencingToken
from .provider import CallContext
from .validate import Violation

#: The metadata key carrying the controller's request id.
REQUEST_ID_METADATA = "x-ccm-request-id"
#: The metadata key carrying the instant the controller gives up on a call,
#: in milliseconds since the Unix epoch.
DEADLINE_METADATA = "x-ccm-deadline"
TRACEPARENT_METADATA = "traceparent"
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")


def trace_id_of(traceparent: object) -> str | None:
    """The trace id of a version-00 W3C ``traceparent``; None for anything
    else (neither id may be all zeros)."""
    if not isinstance(traceparent, str):
        return None
    m = _TRACEPARENT.fullmatch(traceparent.strip())
    if m is None or set(m.group(1)) == {"0"} or set(m.group(2)) == {"0"}:
        return None
    return m.group(1)


log = logging.getLogger("ccmrs_provider")
T = TypeVar("T")
_ids = itertools.count(1)


class _Runtime:
    """What every adapter does with a call: read its context, run the
    provider, turn failures into the contract's statuses."""

    def __init__(self, max_workers: int) -> None:
        self.executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="provider"
        )
        # Probe gets its own threads so it never waits behind provider work.
        self.probe_executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=2, thread_name_prefix="probe"
        )

    def shutdown(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.probe_executor.shutdown(wait=False, cancel_futures=True)

    @staticmethod
    def context(context: grpc.aio.ServicerContext, method: str) -> CallContext:
        """The request id, deadline and fencing token of one call. A
        malformed fencing token is refused: a write whose sender cannot be
        told must not be applied."""
        metadata = {k: v for k, v in (context.invocation_metadata() or ())}
        request_id = metadata.get(REQUEST_ID_METADATA)
        if not isinstance(request_id, str) or not 0 < len(request_id) <= 128:
            request_id = f"sdk-{os.getpid()}-{next(_ids)}"
        remaining = context.time_remaining()
        deadline = None if remaining is None else time.monotonic() + remaining
        # grpc-timeout counts from when the request is read: a provider
        # paused past the caller's deadline must not act on what it gave up on.
        given_up = metadata.get(DEADLINE_METADATA)
        if isinstance(given_up, str) and given_up.isdigit():
            late_ms = time.time() * 1000 - int(given_up)
            if late_ms > 0:
                raise ProviderError(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    None,
                    f"the caller gave up {late_ms:.0f} ms before this request was read"
                    f" ({DEADLINE_METADATA})",
                )
        token = None
        raw = metadata.get(FENCING_TOKEN_METADATA)
        if raw is not None:
            field = f"metadata[{FENCING_TOKEN_METADATA}]"
            if not isinstance(raw, str):
                raise ProviderError.invalid_request(field, "not printable ASCII")
            try:
                token = FencingToken.parse(raw)
            except ValueError as e:
                raise ProviderError.invalid_request(field, str(e)) from None
        return CallContext(
            method=method,
            request_id=request_id,
            deadline=deadline,
            fencing_token=token,
            trace_id=trace_id_of(metadata.get(TRACEPARENT_METADATA)),
        )

    async def call(
        self,
        ctx: CallContext,
        fn: Callable[..., Any],
        *args: Any,
        executor: concurrent.futures.Executor | None = None,
    ) -> Any:
        """Runs one provider method (plain or ``async``). Anything it raises
        but a ProviderError becomes INTERNAL (NotImplementedError:
        UNIMPLEMENTED), its details logged, not sent. A caller giving up
        cancels the awaiting task: :meth:`handle` marks ``ctx`` cancelled."""
        try:
            if inspect.iscoroutinefunction(fn):
                return await fn(ctx, *args)

            def run() -> Any:
                # Queued work whose caller left is never started.
                ctx.raise_if_cancelled()
                return fn(ctx, *args)

            loop = asyncio.get_running_loop()
            copied = contextvars.copy_context()
            result = await loop.run_in_executor(executor or self.executor, copied.run, run)
            if inspect.isawaitable(result):
                return await result
            return result
        except ProviderError:
            raise
        except NotImplementedError:
            raise ProviderError.unimplemented(f"{ctx.method} is not implemented") from None
        except Exception as e:
            ctx.log.exception("provider raised %s", type(e).__name__)
            raise ProviderError.internal(
                f"provider failed (request id {ctx.request_id}): {type(e).__name__}"
            ) from None

    async def handle(
        self,
        method: str,
        context: grpc.aio.ServicerContext,
        body: Callable[[CallContext], Awaitable[T]],
    ) -> T:
        request_id = ""
        try:
            ctx = self.context(context, method)
            request_id = ctx.request_id
            try:
                return await body(ctx)
            except asyncio.CancelledError:
                ctx.cancel()
                raise
        except Violation as v:
            error = ProviderError.invalid_request(v.field, v.problem)
        except ProviderError as e:
            error = e
        except Exception as e:  # an SDK bug; never an answer
            log.exception("%s (request id %s): SDK failure", method, request_id)
            error = ProviderError.internal(f"provider SDK failed: {type(e).__name__}")
        log.debug(
            "%s (request id %s) failed: code %s, reason %s: %s",
            method,
            request_id,
            error.code.name,
            error.reason,
            error,
        )
        await context.abort_with_status(error.to_grpc_status())
        raise AssertionError("unreachable")  # abort_with_status raises


def _rpc(body: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """Makes ``async def Method(self, request, ctx)`` a grpc handler."""
    method = body.__name__

    @functools.wraps(body)
    async def handler(self: Any, request: Any, context: grpc.aio.ServicerContext) -> T:
        return await self._rt.handle(method, context, lambda ctx: body(self, request, ctx))

    return handler


def _check_answer(what: str, check: Callable[..., None], *args: Any) -> None:
    """Runs a ``validate`` check on a provider's answer. A violation is a
    provider bug, which must not reach the controller as a valid answer:
    INTERNAL naming the field."""
    try:
        check(*args)
    except Violation as v:
        raise ProviderError.internal(f"provider answered {what}: {v}") from None


def _expect(value: Any, kind: type[T] | tuple[type, ...], what: str) -> T:
    if not isinstance(value, kind):
        raise ProviderError.internal(
            f"provider answered {type(value).__name__} for {what}, expected "
            + (kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind))
        )
    return value  # type: ignore[return-value]


def _cluster_name(value: str) -> str:
    validate.name("cluster_name", value)
    return value
