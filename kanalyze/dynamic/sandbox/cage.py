"""A fresh process confined as a candidate's worker is, for candidate code that kanalyze runs
outside the worker protocol: KernelBench's own allclose check (audit/allclose.py), which
must run the problem and the candidate in one process, as KernelBench does (parent side).

    cage = Cage.build(mode, candidate, problem)   # scratch folder, environment, cgroup, file view
    Popen([...], cwd=cage.scratch, env=cage.env, start_new_session=True)
    # the process calls confine.apply_limits(cage.limits) first thing, single-threaded
    cage.close()                                  # kills what is left in its cgroup, removes the scratch

What the process gets is a candidate worker's containment (docs/worker-protocol.md): a
cgroup over it and all it starts, rlimits, user, PID, mount, network and IPC namespaces,
the view of the file system `mounts.candidate_view` plans (a /tmp of its own, and on the
CPU a /dev/shm; kanalyze's run directory, signing key and witness folders hidden, the home
and the project read-only, only its scratch folder and its compile caches writable), the
socket filter (on a GPU once the device is open: the process calls
`confine.deny_sockets_now`), and the audit hook refusing sockets and processes but the
compilers.  Its
memory bound is the machine's (`cgroups.memory_limit` for a GPU) on either device: the
check runs the problem's own sizes, never scaled.  A CUDA C++ candidate's extension is
built where the gates' workers build it (`extensions_root`, that candidate's own folder of
kanalyze's build cache: extensions.py): one compile for the gates and the check, not two.
Its JIT caches (Triton's, the CUDA driver's) are the check's own (`JIT`): its kernels compile
as in KernelBench's fresh process, whether or not the gates ran them first.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass

from kanalyze.dynamic.sandbox import cgroups, extensions, mounts, namespaces, rundir
from kanalyze.dynamic.sandbox.confine import AFTER_DEVICE, NOW

JIT = "check"   # the label of the check's JIT caches (process.candidate_caches)


@dataclass
class Cage:
    scratch: str     # the process's working directory, HOME and TMPDIR
    env: dict        # its whole environment
    limits: dict     # what it applies to itself (confine.apply_limits)
    extensions_root: str = ""   # where the gates' workers keep this candidate's CUDA C++ builds

    @classmethod
    def build(cls, mode: str, candidate: str, problem: str) -> "Cage":
        from kanalyze.dynamic.sandbox.process import Limits, candidate_environment

        namespaces.protect_this_process()   # kanalyze's /proc files closed to it
        scratch = tempfile.mkdtemp(dir=rundir.run_directory())
        env, caches = candidate_environment(scratch, mode, candidate, jit=JIT)
        limits = Limits()
        cgroup = cgroups.create(os.path.basename(scratch), cgroups.memory_limit("cuda", None),
                                limits.process_margin)
        return cls(scratch, env, {"memory_bytes": None, "file_bytes": limits.file_bytes,
                                  "process_margin": limits.process_margin, "pid_namespace": True,
                                  "ipc_namespace": True, "deny_sockets": NOW if mode == "cpu" else AFTER_DEVICE,
                                  "files": mounts.candidate_view(scratch, caches, [], [candidate, problem], mode),
                                  "cgroup": cgroup},
                   caches[extensions.ROOT_VARIABLE])

    def close(self) -> None:
        cgroups.remove(self.limits.get("cgroup"))
        shutil.rmtree(self.scratch, ignore_errors=True)

