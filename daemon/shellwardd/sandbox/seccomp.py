"""The seccomp filter every sandboxed command runs under, as a classic BPF program for bwrap.

Choices, and why:

- **Built here, not with libseccomp.** The filter is a deny list of a few dozen syscalls
  plus two flag checks; the program is ~60 instructions that this module assembles and
  tests directly. libseccomp's bindings are not on PyPI for our Python in a maintained
  form (``pyseccomp`` loads the C library at runtime and ``python3-seccomp`` is for the
  system interpreter only), and a C dependency for 60 instructions is not worth it.
- **What is refused** follows Flatpak's and Chromium's lists, narrowed to what a shell
  command never needs: mounting and the new mount API (unhiding secrets, remounting
  ``/`` read-write), ``pivot_root``, kernel keyrings, ``bpf``, ``perf_event_open``,
  ``userfaultfd``, io_uring (a second syscall surface the filter cannot see), module and
  kexec loading, ``setns``, handle-based opens (``open_by_handle_at`` escapes bind
  mounts), clock/host-name/swap/reboot/quota/acct/syslog, and on x86-64 the x32 ABI and
  port I/O. ``ptrace`` stays allowed: debuggers work on the call's own processes and the
  pid namespace bounds what they can reach.
- **New namespaces.** ``clone`` and ``unshare`` are refused when their flags ask for any
  new namespace (a new user namespace would hand the command a full capability set
  again); ``clone3`` passes its flags in memory a filter cannot read, so it answers
  ``ENOSYS`` and the C library falls back to ``clone``, as under Flatpak.
- **Errors, not kills.** Refused syscalls fail with ``EPERM``, so a tool that probes
  (``mount`` in a build script, ``unshare -U``) prints an error instead of dying
  mysteriously. A syscall of another architecture (``int 0x80`` on x86-64) fails too.
"""

from __future__ import annotations

import errno
import platform
import struct
from dataclasses import dataclass

# Architectures we have syscall tables for: audit arch, and the name's number per table.
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}

# name: (x86-64, aarch64); None where the architecture has no such syscall.
_REFUSED: dict[str, tuple[int | None, int | None]] = {
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41),
    "open_tree": (428, 428), "move_mount": (429, 429), "fsopen": (430, 430),
    "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433),
    "mount_setattr": (442, 442), "setns": (308, 268),
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218),
    "bpf": (321, 280), "perf_event_open": (298, 241), "userfaultfd": (323, 282),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294),
    "open_by_handle_at": (304, 265), "name_to_handle_at": (303, 264),
    "swapon": (167, 224), "swapoff": (168, 225), "reboot": (169, 142),
    "sethostname": (170, 161), "setdomainname": (171, 162),
    "settimeofday": (164, 170), "clock_settime": (227, 112), "adjtimex": (159, 171),
    "clock_adjtime": (305, 266), "acct": (163, 89), "quotactl": (179, 60),
    "syslog": (103, 116), "lookup_dcookie": (212, 18), "vhangup": (153, 58),
    "ioperm": (173, None), "iopl": (172, None), "uselib": (134, None),
}  # fmt: skip
# Refused when a namespace flag is set in the first argument.
_CLONE = {"clone": (56, 220), "unshare": (272, 97)}
_CLONE3 = (435, 435)
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME
NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
NAMESPACE_FLAGS |= 0x20000000 | 0x40000000 | 0x00000080
_X32_BIT = 0x40000000

_Instruction = tuple[int, str | None, str | None, int]

# Classic BPF opcodes (linux/filter.h) and seccomp return values (linux/seccomp.h).
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
# Offsets into struct seccomp_data: nr, arch, then args[0]'s low 32 bits (little endian).
_NR, _ARCH, _ARG0_LOW = 0, 4, 16


class SeccompUnavailable(Exception):
    """No syscall table for this machine's architecture."""


@dataclass(frozen=True)
class Filter:
    """The assembled program, and what it refuses (for ``shellward status``)."""

    program: bytes
    arch: str
    refused: tuple[str, ...]

    @property
    def summary(self) -> str:
        return (
            f"{len(self.refused)} syscalls refused ({self.arch}); clone/unshare of new "
            "namespaces refused; clone3 answers ENOSYS"
        )


def build_filter(machine: str | None = None) -> Filter:
    """Assemble the filter for ``machine`` (default: this one)."""
    arch = machine or platform.machine()
    if arch not in _AUDIT_ARCH:
        raise SeccompUnavailable(
            f"no seccomp syscall table for {arch!r} (supported: {', '.join(_AUDIT_ARCH)})"
        )
    column = 0 if arch == "x86_64" else 1
    refused = {name: nr for name, nrs in _REFUSED.items() if (nr := nrs[column]) is not None}
    clone = {name: nrs[column] for name, nrs in _CLONE.items()}

    # Instructions are (code, jump-true label, jump-false label, k); a str marks a label.
    code: list[_Instruction | str] = [
        (_LD_W_ABS, None, None, _ARCH),
        (_JEQ_K, None, "deny", _AUDIT_ARCH[arch]),
        (_LD_W_ABS, None, None, _NR),
    ]
    if arch == "x86_64":
        code.append((_JGE_K, "deny", None, _X32_BIT))
    for nr in refused.values():
        code.append((_JEQ_K, "deny", None, nr))
    code.append((_JEQ_K, "enosys", None, _CLONE3[column]))
    for nr in clone.values():
        code.append((_JEQ_K, "flags", None, nr))
    code += [
        (_RET_K, None, None, _RET_ALLOW),
        "flags",
        (_LD_W_ABS, None, None, _ARG0_LOW),
        (_JSET_K, "deny", None, NAMESPACE_FLAGS),
        (_RET_K, None, None, _RET_ALLOW),
        "deny",
        (_RET_K, None, None, _RET_ERRNO | errno.EPERM),
        "enosys",
        (_RET_K, None, None, _RET_ERRNO | errno.ENOSYS),
    ]
    return Filter(_assemble(code), arch, tuple(sorted(refused)))


def _assemble(code: list[_Instruction | str]) -> bytes:
    """Resolve labels into relative jumps; pack ``struct sock_filter`` entries."""
    labels: dict[str, int] = {}
    body: list[_Instruction] = []
    for entry in code:
        if isinstance(entry, str):
            labels[entry] = len(body)
        else:
            body.append(entry)
    out = bytearray()
    for index, (op, true, false, k) in enumerate(body):
        jt = labels[true] - index - 1 if true else 0
        jf = labels[false] - index - 1 if false else 0
        if not (0 <= jt <= 255 and 0 <= jf <= 255):
            raise ValueError("seccomp filter jump out of range")
        out += struct.pack("=HBBI", op, jt, jf, k)
    return bytes(out)
