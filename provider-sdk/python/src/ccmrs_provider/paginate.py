"""Keyset pagination for list RPCs. A provider returns its whole list; the
SDK sorts it by a unique key and serves the page after the last key seen,
so every entry that exists for the whole listing appears exactly once,
even when entries are added or removed between pages. Tokens have the same
form as the Rust SDK's (``k1.`` + the hex of the last key)."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterable
from typing import TypeVar

from .errors import ProviderError
from .validate import Violation

#: Page size when the request says 0.
DEFAULT_PAGE_SIZE = 500
#: The largest page served, whatever the request asks.
MAX_PAGE_SIZE = 5000

_TOKEN_PREFIX = "k1."

T = TypeVar("T")


def page(
    entries: Iterable[T],
    key: Callable[[T], str],
    page_size: int,
    token: str,
    *,
    what: str = "an entry with key",
) -> tuple[list[T], str]:
    """The page after ``token`` and the token of the next page (empty on the
    last page). Raises :class:`Violation` naming ``page_size`` or
    ``page_token``, and ``ProviderError.internal`` when two entries have
    the same key (``what`` describes the key in its message): the
    provider's listing names each entry once, and pagination relies on it."""
    if page_size < 0:
        raise Violation("page_size", f"{page_size} is negative")
    size = min(page_size, MAX_PAGE_SIZE) if page_size else DEFAULT_PAGE_SIZE
    after = None
    if token:
        after = _decode(token)
        if after is None:
            raise Violation("page_token", "not a token this provider issued")
    ordered = sorted(entries, key=key)
    keys = [key(e) for e in ordered]
    for k, following in itertools.pairwise(keys):
        if k == following:
            raise ProviderError.internal(f"provider listed {what} {k!r} more than once")
    start = 0 if after is None else bisect.bisect_right(keys, after)
    rest = ordered[start : start + size + 1]
    if len(rest) > size:
        rest = rest[:size]
        return rest, _encode(key(rest[-1]))
    return rest, ""


def _encode(key: str) -> str:
    return _TOKEN_PREFIX + key.encode().hex()


def _decode(token: str) -> str | None:
    if not token.startswith(_TOKEN_PREFIX):
        return None
    try:
        return bytes.fromhex(token[len(_TOKEN_PREFIX) :]).decode()
    except ValueError:
        return None
