"""The dynamic pass: gates that confirm or refute each flag by running the kernel.

Data flows one way (DESIGN.md): static findings → gate selection (confirm.py)
→ sandboxed worker runs (runner.py, sandbox.py, worker.py) → verdicts
(gates/) → witnesses (witness.py) → the report.

  harness.py     problem + candidate pairs (KernelBench, contracts)
  cases.py       what a gate asks to run; size scaling and perturbation
  runner.py      a session: workers, cases, verdicts; `run_gates`, `run_at_sizes`
  sandbox.py     worker processes: limits, timeouts, crashes as results (parent side)
  confine.py     what a worker does to itself: rlimits, network namespace, audit hook
  worker.py      the worker process's main loop
  zygote.py      a process that has imported torch and triton once and forks the workers
  zygote_client.py  this process's zygotes: started on first need, asked for workers, shut down at exit
  environment.py poison, program order, TF32, recorders for one run
  execute.py     one case, reference side and candidate side
  interpreter.py Triton interpreter hooks: permuted order, bounds checks, TF32
  devicemap.py   `cuda` mapped to the CPU for KernelBench-style code
  loading.py     problems at given sizes, candidates
  extensions.py  CUDA C++ candidates' torch extensions, built once per source (shared cache)
  inputs.py      input distributions and injected specials
  recording.py   torch calls and kernel launches (RES001)
  tensors.py     arrays across the process boundary
  results.py     typed views of what workers returned
  compare.py     calibrated tolerance, bits, special-value classes
  promote.py     the PRC002 fp32-promotion rewrite (LibCST)
  promote_cuda.py  the same for CUDA C++ in load_inline strings (half → float accumulators)
  confirm.py     findings ↔ verdicts for `check --dynamic`
  witness.py     witness files and `kanalyze replay`

Nothing here is imported by the static path; torch and triton are imported in
the workers only (and by the parent never).
"""
