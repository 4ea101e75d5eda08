"""RES002 resource-budget: the compiled kernel exceeds the target's shared memory, registers, threads or tensor memory.

This clause is decided by its gate; static detectors join with later passes.
"""

from kanalyze.rules.base import Rule


class ResourceBudget(Rule):
    code = "RES002"
    name = "resource-budget"
    summary = "The compiled kernel exceeds the target's shared memory, registers, threads or tensor memory"
    gate = "res002-largest-config"
    has_detectors = False
    docs = """
    ## What it does
    Reads compiled metadata (shared memory per block, registers and spills,
    threads per block, tensor-memory columns on sm_100) and launches the
    largest configuration.  Detectors come with the IR pass (`--ir`).

    ## Why is this bad
    A configuration that does not fit fails to launch, or spills and runs far
    slower than the benchmark showed, on the shapes users actually run.

    ## Example
    An autotune config with 256×256×128 fp32 tiles and 4 stages.

    ## Use instead
    Prune configurations that exceed the budget (`prune_configs_by`).
    """
