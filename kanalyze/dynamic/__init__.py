"""The dynamic pass: gates that confirm or refute each flag by running the kernel.

Data flows one way (DESIGN.md): static findings → gate selection (confirm.py)
→ sandboxed worker runs (runner.py, sandbox/) → verdicts (gates/) → witnesses
(witness.py) → the report.

  harness.py     problem + candidate pairs (KernelBench, contracts)
  cases.py       what a gate asks to run; size scaling and perturbation
  planning.py    the sizes a run starts from, and how the inputs grow with each knob
  runner.py      a session: workers, cases, verdicts; `run_gates`, `run_at_sizes`
  streaming.py   each case judged as it ends, where the gates' arrays would not fit one session
  sandbox/       where untrusted code runs: worker processes, zygotes, confinement,
                 the worker's loop, one case's execution, transport (its docstring)
  gates/         one module per gate: the case it asks for and the verdict it draws
  environment.py poison, program order, TF32, recorders for one run (worker side)
  interpreter.py Triton interpreter hooks: permuted order, bounds checks, TF32 (worker side)
  devicemap.py   `cuda` mapped to the CPU for KernelBench-style code (worker side)
  loading.py     problems at given sizes, candidates (worker side)
  kernel_call.py a kernel harness's call: wrapper or bare launch (worker side)
  inputs.py      input distributions and injected specials
  recording.py   torch calls and kernel launches (RES001)
  results.py     typed views of what workers returned
  compare.py     calibrated tolerance, bits, special-value classes
  counterexample.py  MEM003/MEM004 counterexamples → calls
  reference_cache.py reference outputs kept across gates
  promote.py     the PRC002 fp32-promotion rewrite (LibCST)
  promote_cuda.py  the same for CUDA C++ in load_inline strings (half → float accumulators)
  reverse_order.py the ORD001 rewrite for a GPU: every program's order reversed (LibCST; CUDA text)
  autotune_pin.py  a variant's autotuners keep the configs the candidate chose (worker side)
  confirm.py     findings ↔ verdicts for `check --dynamic`
  witness.py     witness files and `kanalyze replay`

Nothing here is imported by the static path, and nothing here imports the
analyzer's parsers; torch and triton are imported in the workers only (and by
the parent never).
"""
