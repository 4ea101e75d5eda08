"""The Triton kernel model: one Python file read with LibCST, never imported.

  model.py          TritonModule: the file's functions, jit functions, launches and calls
  entities.py       its parts (Function, JitFunction, Param, Launch, CallSite)
  collect.py        the one walk over the tree that fills a model
  calls.py          a call's arguments: binding to parameters, `keyword`, literals
  dataflow.py       def-use graph per function (networkx)
  reaching.py       ordered reaching definitions
  dtypes.py         the dtype facts below in one import
  dtype_names.py    which dtype an expression names (`tl.float16`, a constexpr, a cast's target)
  dtype_promotion.py the result dtype of Triton arithmetic and `tl` functions
  dtype_flow.py     DtypeFlow: the dtype of a kernel value, a pointer's elements, a host tensor
  host_dtypes.py    the dtype of a torch tensor in host code (factories, casts, views)
  host_attributes.py what `self.w` holds in a method: what the class's methods assign or append to it
  host_checks.py    what a host function's own dtype checks (asserts, raises, branches) say of its tensors
  host_callers.py   who calls a host function within its file, and which argument each parameter gets
  cross_callers.py  what other checked modules pass to a module's kernel launchers (the project index)
  cross_launches.py what other checked modules pass to a module's kernels they launch themselves
  slot_args.py      what a launch unpacks from a params object (`kernel(*params.args())`)
  helper_returns.py what a jit helper's call returns, a pair unpacked element by element
  backends.py       which accelerator a module's kernels are written for (Ascend: IEEE dots by default)
  dot_partners.py   what one tl.dot's known operand says of the data another dot loads from the same pointer
  narrowing.py      when a cast to fp16/bf16/fp8 is a precision downgrade (PRC001)
  pointers.py       which kernel parameter a pointer expression writes through
  program_slices.py whether an atomic's address is injective over the launch's programs (ORD001)
  host.py           the host side: reference vs candidate functions, wrappers
  host_compute.py   where a forward path's work happens (torch ops, fallbacks)
  host_sizes.py     host sizes in order: whose size a value is, exact grid divisions
  destinations.py   which tensors a host function writes by contract (out=, in-place APIs), which it reads
  shapes.py         constant sizes, shape-derived values
  grids.py          a launch's grid as arithmetic
  early_exits.py    a kernel's early returns: which programs skip their stores
  constexpr_branches.py  branches on a constexpr that no config, heuristic or launch ever takes
  shape_asserts.py  conditions that pin a shape
  access_offsets.py the offsets of a load or store
  size_literals.py  literal sizes and shape checks that pin one shape, or are tiles, halves, a test's shape
  tile_extents.py   whether an arange stays inside its axis (exact factors, rows of a stride, fixed-arity reads)
  tile_bounds.py    the bound of each dimension an unmasked load or store runs over (comparison, stepping loop, grid)
  exact_sizes.py    host values that are a size read from the input as it is, never rounded up
  dispatch_facts.py what the host knows about sizes where it picks a kernel (branches, asserts, a helper's flag)
  row_windows.py    columns that stay inside one row of a width the host fixes or dispatches on
  full_blocks.py    loops that visit only full blocks (tail peeled and masked), guards keeping a block in bounds,
                    blocks a pruner or an assert keeps whole, tiles of a grid rounded down
  nan_tests.py      NaN / ±Inf tests and metadata-only reads
  nan_carriers.py   which values can hold an input NaN (none, a lane, a whole row), which calls drop it
  nan_paths.py      the def-use paths a NaN travels; what reaches a store or return, a load address
  nan_escape.py     whether a dropped NaN reaches the output by another path (softmax statistics excused)
  exp_overflow.py   NaN made where the reference is finite: exp ratios overflowing fp32, log-cumsum products
  patches.py        assignments that replace a library function, and restores of it
  cached_results.py results stored by one forward call and returned by a later one

Rules read these facts; they never parse anything themselves.
"""
