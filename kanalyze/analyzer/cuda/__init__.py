"""The CUDA kernel model: CUDA C++ read with tree-sitter-cuda, wherever it is written.

  sources.py        CudaUnit: one translation unit and the map back to the file the user edits
  inline.py         CUDA strings inside Python (`load_inline`, cupy, `cpp_extension.load`) via LibCST
  inline_plain.py   ... the same for plain files, through Python's `ast` (faster, same positions)
  fold.py           constant folding of the Python expressions that build those strings
  model.py          CudaModule: the unit's functions, launches, calls, declarations
  entities.py       its parts (CudaFunction, Variable, CudaCall, CudaLaunch)
  build.py          reading the tree into those parts
  types.py          C++ types as far as the rules need them
  values.py         integer constants, launch dimensions, initialisers
  facts.py          facts several CUDA rules share (barriers, shared memory, atomics)
  shared_races.py   which shared-memory accesses race an earlier one with no barrier between (ORD002)
  thread_pins.py    ... the accesses one thread makes, the stores of one value by every thread
  lower_bounds.py   fp32 arguments provably >= 1, which no subnormal reaches (EXC002's logs)
  block_sums.py     ... softmax's normaliser summed across a block or a warp (shared memory, shuffles)
  warp_shuffles.py  values combined across a warp by shuffles, and the helpers that do only that
  nan_paths.py      does the NaN a max/min drops reach an output by another path (helpers followed into callers)
  forward_paths.py  which branches of a Python forward path a GPU run executes; layers that are the identity
  positions.py      rows and columns, computed for findings only
  suppressions.py   `// NOLINT`, `// NOLINTNEXTLINE`, file-level

Nothing here compiles or runs what it reads.
"""
