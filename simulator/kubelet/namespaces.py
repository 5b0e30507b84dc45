"""Linux namespaces from Python: the few system calls the process kubelet needs (Python 3.11 has no os.setns or
os.unshare), a socket made inside another network namespace, and the check that this machine can do it at all.

A network namespace is named by a file (`/proc/<pid>/ns/net` of a process that lives in it), never by a global
name (`ip netns add`): when the process kubelet dies, the pause processes holding its namespaces die with it
(PR_SET_PDEATHSIG) and the kernel removes the namespaces, their veths and their routes; nothing outlives a
killed test run. `setns` moves the calling thread only, so a socket can be made inside a pod's namespace and
used from the kubelet's event loop in the host's: the socket stays where it was made.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
from collections.abc import Iterator

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_MOVE = 0x2000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38
TOOLS = ("ip", "nsenter")
"""The programs the process kubelet runs: iproute2's `ip` and util-linux's `nsenter`."""

_libc = ctypes.CDLL(None, use_errno=True)


class HostUnsupportedError(RuntimeError):
    """This machine cannot run pods as processes; the message says why and what would fix it."""


def _call(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def setns(fd: int, nstype: int) -> None:
    _call(_libc.setns(fd, nstype), "setns")


def unshare(flags: int) -> None:
    _call(_libc.unshare(flags), "unshare")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encoded = [None if item is None else item.encode() for item in (source, target, fstype, data)]
    _call(
        _libc.mount(encoded[0], encoded[1], encoded[2], ctypes.c_ulong(flags), encoded[3]),
        f"mount {source or fstype} on {target}",
    )


def sethostname(name: str) -> None:
    encoded = name.encode()
    _call(_libc.sethostname(encoded, len(encoded)), "sethostname")


def die_with_parent() -> None:
    """SIGKILL this process when the one that started it ends (cleared by a change of user: call it after)."""
    _call(_libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")


def no_new_privileges() -> None:
    """What `allowPrivilegeEscalation: false` means: no set-user-ID program gives this process more rights."""
    _call(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


def netns_of(pid: int) -> str:
    """The file that names the network namespace of process `pid`."""
    return f"/proc/{pid}/ns/net"


@contextlib.contextmanager
def entered(netns: str) -> Iterator[None]:
    """The calling thread in network namespace `netns` for the block, back in its own afterwards."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(netns, os.O_RDONLY)
        try:
            setns(target, CLONE_NEWNET)
            try:
                yield
            finally:
                setns(own, CLONE_NEWNET)
        finally:
            os.close(target)
    finally:
        os.close(own)


def socket_in(netns: str | None, family: int = socket.AF_INET) -> socket.socket:
    """A non-blocking TCP socket of namespace `netns` (None: this thread's own)."""
    if netns is None:
        made = socket.socket(family, socket.SOCK_STREAM)
    else:
        with entered(netns):
            made = socket.socket(family, socket.SOCK_STREAM)
    made.setblocking(False)
    return made


def unsupported_reason() -> str | None:
    """Why this machine cannot run the process kubelet, or None when it can: it needs root (namespaces, mounts,
    veths), `ip` and `nsenter`, and network namespaces in the kernel."""
    if os.geteuid() != 0:
        return "the process kubelet needs root: it makes network and mount namespaces, veths and a bridge"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"the process kubelet needs {' and '.join(missing)} (iproute2 and util-linux) on PATH"
    if not os.path.exists("/proc/self/ns/net"):
        return "the kernel has no network namespaces (/proc/self/ns/net is missing)"
    return None


def check_host() -> None:
    """`HostUnsupportedError` unless the machine can run the process kubelet."""
    if (reason := unsupported_reason()) is not None:
        raise HostUnsupportedError(reason)
