"""Fencing tokens: which leader sent a mutation (types.proto, "Fencing").

With leader election on, every mutation carries the gRPC metadata
``x-ccm-fencing-token`` = ``<term>:<holder>``: the Lease's leaseTransitions
when its holder acquired it, and its holderIdentity. A provider that
remembers the newest token seen per cluster refuses a write from a deposed
leader; :class:`Fence` does that bookkeeping.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

#: The metadata key carrying the token.
FENCING_TOKEN_METADATA = "x-ccm-fencing-token"
#: Longest holder identity accepted.
MAX_HOLDER_BYTES = 253


@dataclass(frozen=True)
class FencingToken:
    """One leader's term. Two holders with the same term are incomparable
    (only a Lease deleted and created again causes it): each supersedes the
    other."""

    term: int
    holder: str

    @classmethod
    def parse(cls, value: str) -> FencingToken:
        """Parses ``<term>:<holder>``; raises ValueError saying what is wrong."""
        term, sep, holder = value.partition(":")
        if not sep:
            raise ValueError(f"{value!r} is not <term>:<holder>")
        if not term.isascii() or not term.isdigit() or int(term) >= 2**64:
            raise ValueError(f"term {term!r} is not a decimal number")
        if not holder:
            raise ValueError("the holder identity is empty")
        size = len(holder.encode())
        if size > MAX_HOLDER_BYTES:
            raise ValueError(f"the holder identity is {size} bytes, more than {MAX_HOLDER_BYTES}")
        return cls(int(term), holder)

    def __str__(self) -> str:
        return f"{self.term}:{self.holder}"

    def is_superseded_by(self, newest: FencingToken) -> bool:
        """True when a provider that has seen ``newest`` must refuse a write
        carrying this token: an older term, or the same term from someone
        else."""
        if self.term != newest.term:
            return self.term < newest.term
        return self.holder != newest.holder

    @staticmethod
    def newest(seen: FencingToken | None, arriving: FencingToken) -> FencingToken:
        """The high-water mark after ``arriving``: replaced only by a
        strictly greater term."""
        if seen is not None and seen.term >= arriving.term:
            return seen
        return arriving


class Fence:
    """The newest fencing token seen per cluster name, for providers whose
    cloud has no conditional writes of its own. Call :meth:`admit` under the
    same lock that commits the write, just before committing it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._newest: dict[str, FencingToken] = {}

    def admit(self, cluster_name: str, token: FencingToken | None) -> None:
        """Records ``token`` and raises ``ProviderError.not_leader`` when it
        is superseded. Writes without a token (leader election off) pass."""
        if token is None:
            return
        from .errors import ProviderError

        with self._lock:
            newest = FencingToken.newest(self._newest.get(cluster_name), token)
            self._newest[cluster_name] = newest
        if token.is_superseded_by(newest):
            raise ProviderError.not_leader(newest)

    def newest(self, cluster_name: str) -> FencingToken | None:
        """The newest token seen for ``cluster_name``."""
        with self._lock:
            return self._newest.get(cluster_name)
