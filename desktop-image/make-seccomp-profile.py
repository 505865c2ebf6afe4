#!/usr/bin/env python3
"""Writes desktop-image/seccomp-chromium.json: the container's seccomp profile.

An allowlist: every x86-64 system call of the kernel headers (`asm/unistd_64.h`, from
linux-libc-dev) except the ones below, which a container never needs and which Docker's default
profile refuses too (kernel modules and kexec, the clock, swap, reboot, quotas, keyrings, bpf,
perf, ptrace and cross-process memory, mounting and namespaces joined from outside, the old
syscalls nobody uses). Anything else, and every system call of a newer kernel, is refused with
EPERM.

What differs from Docker's default: `unshare` and `clone` may create namespaces. Chromium's
sandbox puts each renderer in new user, PID and network namespaces; Docker's default refuses
that to a container without CAP_SYS_ADMIN, so Chromium would have to run without its sandbox.
In a user namespace a process has capabilities only over that namespace's own objects.

    python3 desktop-image/make-seccomp-profile.py [HEADER] > desktop-image/seccomp-chromium.json
"""

from __future__ import annotations

import json
import re
import sys

HEADER = "/usr/include/x86_64-linux-gnu/asm/unistd_64.h"

REFUSED = {
    # kernel code, boot and machine state
    "init_module", "finit_module", "delete_module", "create_module", "query_module",
    "get_kernel_syms", "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff",
    "iopl", "ioperm", "acct", "quotactl", "quotactl_fd", "nfsservctl", "uselib", "ustat",
    "sysfs", "_sysctl", "vhangup", "lookup_dcookie", "syslog",
    # the clocks
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "stime",
    # keyrings, bpf, perf, userfaultfd
    "add_key", "request_key", "keyctl", "bpf", "perf_event_open", "userfaultfd",
    # other processes' memory, and tracing
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "process_madvise",
    # NUMA policy of the host
    "mbind", "set_mempolicy", "get_mempolicy", "move_pages", "migrate_pages",
    "set_mempolicy_home_node",
    # mounts, file handles and joining another namespace
    "mount", "umount2", "pivot_root", "setns", "open_by_handle_at", "name_to_handle_at",
    "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
    # io_uring bypasses the filter for the operations it queues
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    # old or obscure
    "vserver", "tuxcall", "security", "afs_syscall", "putpmsg", "getpmsg",
    "epoll_ctl_old", "epoll_wait_old", "remap_file_pages", "modify_ldt",
}


def syscalls(header: str) -> list[str]:
    with open(header) as f:
        names = re.findall(r"^#define __NR_(\w+)\s+\d+", f.read(), re.M)
    return sorted(set(names) - REFUSED)


def main() -> None:
    header = sys.argv[1] if len(sys.argv) > 1 else HEADER
    profile = {
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": 1,
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
        "syscalls": [{"names": syscalls(header), "action": "SCMP_ACT_ALLOW"}],
    }
    json.dump(profile, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
