"""The Unix socket the controller and the provider meet on: parsing
``unix://`` endpoints, clearing a stale socket, and its permission bits."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat

#: The default provider endpoint.
DEFAULT_ENDPOINT = "unix:///var/run/cloud-provider/provider.sock"


class EndpointError(Exception):
    """The endpoint cannot be served: malformed, in use, or not a socket."""


def socket_path(endpoint: str) -> str:
    """``unix:///abs/path`` (or ``unix:/abs/path``) to ``/abs/path``."""
    for prefix in ("unix://", "unix:"):
        if endpoint.startswith(prefix):
            rest = endpoint[len(prefix) :]
            break
    else:
        raise EndpointError(
            f"invalid endpoint {endpoint!r}: only unix:///absolute/path endpoints are supported"
        )
    if not rest.startswith("/"):
        raise EndpointError(f"invalid endpoint {endpoint!r}: the socket path must be absolute")
    return rest


def clear_stale_socket(path: str) -> None:
    """Removes a socket left behind by a dead server. Refuses to touch a
    socket a live server answers on, or anything that is not a socket."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise EndpointError(f"socket {path}: exists and is not a socket; refusing to remove it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
    except OSError as e:
        if e.errno not in (errno.ECONNREFUSED, errno.ENOENT):
            raise EndpointError(f"socket {path}: {e}") from e
    else:
        raise EndpointError(f"socket {path} is in use by a running server")
    finally:
        probe.close()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def remove_socket(path: str) -> None:
    """Removes the socket at ``path`` if it is still a socket."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
