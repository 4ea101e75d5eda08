"""Where untrusted code runs: worker processes, their confinement, and what crosses to them.

  process.py        the parent side: start a worker, feed it jobs, read its status (bounded, checked)
  dispatch.py       ... run a list of cases through workers, a fresh one after each failure, with its blame
  rundir.py         the one run directory per process, reaped after a crash; the disk check
  zygote_client.py  ... through a zygote of this kanalyze process, one per device mode
  zygote.py         the process that imports torch and triton once and forks the workers
  confine.py        what a worker does to itself first: rlimits, namespaces, audit hook
  namespaces.py     ... its user, PID, mount and network namespaces; kanalyze made non-dumpable
  mounts.py         ... what it sees of the files: kanalyze's run folder and key hidden, home read-only
  cgroups.py        ... one cgroup per candidate worker: memory and task limits for it and its children
  disguise.py       ... nothing in its process names kanalyze: modules, files, variables, frames
  exits.py          how a worker ended, in words (the exception, where kanalyze's own code failed)
  worker.py         the worker's main loop: import the problem and candidate, serve cases
  execute.py        one case in a worker: the candidate side, and what both sides share
  reference_side.py ... the reference side: model, inputs, float64 reference, withheld outputs
  model_state.py    ... a built model given to every case as built, and upcast for a float64 run (no copies)
  float64.py        ... the float64 run, on the model itself upcast
  encoding.py       ... a case's values described and rebuilt across the two sides
  device_share.py   a candidate's device tensors to the reference worker through CUDA IPC
  extensions.py     CUDA C++ candidates' torch extensions, built once per source
  transport.py      values across the process boundary: folders of .npy files

Only the worker side imports torch or triton, and only the worker runs problem or
candidate code; the parent decides every verdict from what comes back.
"""
