"""Bounds proofs for Triton loads and stores (MEM003) and their int32 arithmetic (MEM004).

For every launched kernel, every launch site and every constexpr configuration
(each `triton.Config` of an autotune list is a proof of its own), each
`tl.load` / `tl.store` / `tl.atomic_*` becomes z3 terms and two questions are
asked:
  - MEM003: can the mask let an offset outside [0, numel) through, for runtime
    sizes in [1, max-size]?  Either a proof, or the smallest counterexample;
  - MEM004: can an int32 operation of the offset, mask or loop-bound
    arithmetic wrap, for tensors of up to max-numel elements?
An access the extraction does not model is "unknown", with the reason; so is
one where the solver gives up, and one the file's proof budget (`proof-rlimit`,
z3 resource units) or its watchdog (a CPU deadline below the file's CPU budget)
left unasked, which KAN003 reports.  Nothing here imports z3 until a file has a
launched kernel with a memory access.

The parts, in the order data flows through them (proofs.py drives them, per file):
  launch.py    binds a launch: the wrapper's values for the kernel's parameters
  host.py      the wrapper's expressions (sizes, grid, asserts) as z3 terms,
  tensors.py   ... and the tensors it passes (shapes, extents)
  kernel.py    the kernel's expressions as tiles of z3 terms, per access,
  flow.py      ... following names through loops and branches
  terms.py     tiles: lanes, broadcasting, int32/int64 arithmetic, wrap checks
  symbols.py   the symbols (sizes, program ids, lanes, iterations) and their facts
  checks.py    the two questions and the counterexamples handed to the gates
  screen.py    proves the common idioms in Python first: only the rest reaches z3
  solver.py    asking z3 within resource budgets (a question, a file), one
               incremental solver a file; the smallest model
  watchdog.py  stops z3 at the file's CPU deadline, which the counts miss

Assumptions every verdict carries: the tensors the wrapper receives are
contiguous; a received tensor's rank is what the wrapper's reads imply
(`M, N = x.shape` → 2-D; read only through `x.numel()` → 1-D); offsets are
exact integers for MEM003 (wrap-around is MEM004's question).
"""
