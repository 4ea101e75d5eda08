"""No new socket in a candidate's process, below Python: a seccomp filter (stdlib only).

The audit hook (confine.install_guards) refuses sockets that Python code opens, but
ctypes calls libc's `socket()` and `connect()` directly.  A network namespace has no
interface to reach, yet a socket named in the file system is reached through the
mount namespace, read-only mounts included: a tmux or screen server's socket in /tmp,
an ssh or gpg agent's, the session bus, docker's.  Connected there, a candidate runs
commands as the user, outside every namespace kanalyze made.

On a GPU it is installed once the device is open (confine.deny_sockets_now): the CUDA
driver opens sockets when it starts, and with the filter in place before that
`cudaGetDeviceCount` fails (error 304, "OS call failed"; seen on an H200); once started
it needs none.

`deny_sockets()` installs a seccomp filter on every thread of the process (and all it
starts inherits it; no process can lift it): the `socket` system call fails with
EACCES, and so do `io_uring_setup` (io_uring opens and connects sockets without
`socket()`) and any system call of another ABI than the machine's own (32-bit x86,
x32), through which the same calls have other numbers.  `socketpair()` and the
sockets and pipes the process already holds keep working.  The filter is installed
with `no_new_privs` (required of a process without CAP_SYS_ADMIN): nothing the
candidate runs gains privileges through set-user-ID files.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

# Per architecture: its audit identifier and the numbers of socket, io_uring_setup and seccomp.
_ARCHES = {"x86_64": (0xC000003E, 41, 425, 317), "aarch64": (0xC00000B7, 198, 425, 277)}
_X32_BIT = 0x40000000

_LD_ABS_W, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_PR_SET_NO_NEW_PRIVS, _SET_MODE_FILTER, _FLAG_TSYNC = 38, 1, 1


def _program(arch: int, socket: int, io_uring_setup: int, x32: bool) -> bytes:
    """The filter as BPF instructions (struct sock_filter: u16 code, u8 jt, u8 jf, u32 k)."""
    deny = _RET_ERRNO | errno.EACCES
    steps = [
        (_LD_ABS_W, 0, 0, 4),              # seccomp_data.arch
        (_JEQ_K, 1, 0, arch),
        (_RET_K, 0, 0, deny),              # another ABI: refused
        (_LD_ABS_W, 0, 0, 0),              # seccomp_data.nr
    ]
    if x32:
        steps.append((_JGE_K, 3, 0, _X32_BIT))   # an x32 call: to the refusal below
    steps += [
        (_JEQ_K, 2, 0, socket),
        (_JEQ_K, 1, 0, io_uring_setup),
        (_RET_K, 0, 0, _RET_ALLOW),
        (_RET_K, 0, 0, deny),
    ]
    return b"".join(struct.pack("=HBBI", *step) for step in steps)


def deny_sockets() -> str:
    """Install the filter in this process; what holds, in words (a refusal says why)."""
    machine = platform.machine()
    if not os.uname().sysname == "Linux" or machine not in _ARCHES:
        return f"not refused below the audit hook (no seccomp filter for {os.uname().sysname} {machine})"
    arch, socket, io_uring_setup, seccomp = _ARCHES[machine]
    code = _program(arch, socket, io_uring_setup, x32=machine == "x86_64")
    filters = ctypes.create_string_buffer(code, len(code))
    program = struct.pack("=HxxxxxxQ", len(code) // 8, ctypes.addressof(filters))   # struct sock_fprog
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"not refused below the audit hook (no_new_privs: {os.strerror(ctypes.get_errno())})"
    held = ctypes.create_string_buffer(program, len(program))
    result = libc.syscall(ctypes.c_long(seccomp), ctypes.c_long(_SET_MODE_FILTER), ctypes.c_long(_FLAG_TSYNC),
                          held)
    if result != 0:
        why = f"thread {result} could not be synchronised" if result > 0 else os.strerror(ctypes.get_errno())
        return f"not refused below the audit hook (seccomp: {why})"
    return "socket() refused to every thread (seccomp)"
