"""The compile worker: runs in its own process, imports Triton and the scratch
module, and compiles kernels ahead of time for a GPU that need not be there.

Compiling a Triton kernel executes Python: the decorators, the module
constants, `@triton.heuristics` lambdas and the kernel's own compile-time code.
The scratch module holds the user's code, so this runs like any untrusted
candidate: a separate process in a scratch directory, with a scrubbed
environment, killed by the parent on a timeout.  This file imports nothing of
kanalyze (it is run as a script).

Protocol: one JSON request on stdin

    {"module": "/scratch/src/k.py", "out": "/scratch/out", "jobs": [{"id": .., "arch": 90, ...context}]}

and JSON lines on stdout, flushed one at a time so that the parent can time
each compilation:

    {"event": "imported"}
    {"event": "config", "id": .., "index": 0}             before each compilation
    {"event": "done", "id": .., "results": [...]}         one per job
    {"event": "fatal", "error": ".."}                     the module cannot be imported
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import sys
import time
import traceback

MAX_ERROR = 600


def _innermost(exc: BaseException) -> BaseException:
    """Triton wraps an error in a helper into the caller's CompilationError, with
    no message of its own: the cause, and where it happened, are inside."""
    for _ in range(16):
        if getattr(exc, "error_message", "x") is None and exc.__cause__ is not None:
            exc = exc.__cause__
        else:
            break
    return exc


def _short(exc: BaseException) -> str:
    exc = _innermost(exc)
    message = getattr(exc, "error_message", None)
    text = message.strip() if isinstance(message, str) and message.strip() else f"{type(exc).__name__}: {exc}".strip()
    if type(exc).__name__ == "CompilationError" and not message:
        # Its text repeats the source with a `^` under the column; the cause is below.
        lines = [line for line in text.splitlines() if line.strip() and line.strip() != "^"]
        text = lines[-1].strip() if lines else text
    text = " ".join(text.split())
    return text if len(text) <= MAX_ERROR else text[: MAX_ERROR - 1] + "…"


def _error_row(exc: BaseException, scratch: str) -> int | None:
    """The user row a Triton CompilationError points at (the scratch keeps rows)."""
    exc = _innermost(exc)
    src, node = getattr(exc, "src", None), getattr(exc, "node", None)
    lineno = getattr(node, "lineno", None)
    if not src or not lineno:
        return None
    head = src.strip().splitlines()[0] if src.strip() else ""
    at = scratch.find(head)
    if at < 0:
        return None
    return scratch.count("\n", 0, at) + lineno


_LOOP_CARRIED = re.compile(r"Loop-carried variable \w+ has initial type <[^>]*?(fp16|bf16)> but is re-assigned to "
                           r"<[^>]*?fp32>")


def _half_precision_retry(exc: BaseException, job: dict) -> tuple[dict, str] | None:
    """A kernel whose fp16/bf16 accumulator only type-checks with half-precision
    inputs does not compile with the fp32 pointers assumed for it: it is meant
    for half inputs.  (job with those pointers in that dtype, the note saying so)"""
    match = _LOOP_CARRIED.search(_short(exc))
    if match is None or not job.get("assumed_pointers"):
        return None
    dtype = match.group(1)
    signature = dict(job["signature"])
    for name in job["assumed_pointers"]:
        signature[name] = f"*{dtype}"
    names = ", ".join(job["assumed_pointers"])
    return ({**job, "signature": signature},
            f"{names}: *{dtype} assumed (with fp32 inputs the kernel does not compile: its {dtype} accumulator "
            f"would change type in the loop)")


def _show(value) -> str:
    import triton.language as tl

    if isinstance(value, tl.dtype):
        return f"tl.{value.name}" if hasattr(value, "name") else str(value)
    if isinstance(value, str):
        return repr(value)
    return str(value)


def _unwrap(module, names: list[str]):
    """(JITFunction, autotune configs or [None], heuristics) for the first name that is a kernel."""
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.jit import JITFunction

    for name in names:
        obj = getattr(module, name, None)
        configs, heuristics = [None], {}
        for _ in range(8):
            if isinstance(obj, JITFunction):
                return obj, configs, heuristics
            if isinstance(obj, Autotuner):
                configs = list(obj.configs) or [None]
            elif isinstance(obj, Heuristics):
                heuristics.update(obj.values)
            obj = getattr(obj, "fn", None)
            if obj is None:
                break
    raise LookupError(f"`{names[0]}` is not a Triton jit function once the module is loaded")


def _compile_one(jit, job: dict, config, heuristics: dict, namespace: dict, arch: int, out: str, index: int) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    notes: list[str] = []
    values: dict = {}
    kwargs = dict(getattr(config, "kwargs", {}) or {})
    evaluated = {}
    for name, text in job["constexprs"].items():
        evaluated[name] = eval(text, namespace)  # noqa: S307 - the scratch module's own expressions
    for param in jit.params:
        name = param.name
        if name in evaluated:
            values[name] = evaluated[name]
        elif name in kwargs:
            values[name] = kwargs[name]
        elif name in job["settings_values"]:
            values[name] = eval(job["settings_values"][name], namespace)  # noqa: S307
        elif param.is_constexpr and param.has_default:
            values[name] = param.default
    if heuristics:
        args = {p.name: values.get(p.name, job["ints"].get(p.name)) for p in jit.params}
        for name, rule in heuristics.items():
            if name in evaluated or name in job["settings_values"]:
                continue
            try:
                values[name] = args[name] = rule(args)
            except Exception as exc:  # a heuristic that reads tensors: fall back below
                notes.append(f"@triton.heuristics for {name} failed ahead of time ({type(exc).__name__})")
    signature: dict = {}
    constexprs: dict = {}
    for param in jit.params:
        name = param.name
        is_constant = param.is_constexpr or name in kwargs or name in heuristics
        if is_constant and name not in values and name in job["guesses"]:
            text, note = job["guesses"][name]
            values[name] = eval(text, namespace)  # noqa: S307
            notes.append(note)
        if is_constant:
            if name not in values:
                raise LookupError(f"constexpr `{name}` has no value ahead of time"
                                  + (f" (the launch passes `{job['unresolved'][name]}`)" if name in job["unresolved"] else "")
                                  + "; set it under [tool.kanalyze.ir] constexprs")
            signature[name], constexprs[name] = "constexpr", values[name]
        elif param.annotation_type:
            signature[name] = param.annotation_type
        elif job["signature"].get(name) == "none":
            signature[name], constexprs[name] = "constexpr", None
        else:
            signature[name] = job["signature"].get(name, "i32")
    options = {}
    if config is not None:
        for option in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
            if getattr(config, option, None) is not None:
                options[option] = getattr(config, option)
    else:
        for option, text in job["options"].items():
            options[option] = eval(text, namespace)  # noqa: S307
    # What Triton's launcher specializes at run time for typical arguments: torch
    # allocations are 16-byte aligned, sizes and strides multiples of 16.  Without
    # it loads are not vectorized nor pipelined, and the resources are not the real ones.
    attrs = {}
    for position, param in enumerate(jit.params):
        kind = signature[param.name]
        if (kind.startswith("*") or kind in ("i32", "i64")) and not param.do_not_specialize \
                and not param.do_not_specialize_on_alignment:
            attrs[(position,)] = [["tt.divisibility", 16]]
    log = io.StringIO()
    started = time.time()
    with contextlib.redirect_stdout(log):
        compiled = triton.compile(ASTSource(jit, signature, constexprs, attrs), target=GPUTarget("cuda", arch, 32),
                                  options=options)
    files = {}
    for stage in ("ttir", "ttgir", "ptx", "cubin"):
        if stage in compiled.asm:
            path = os.path.join(out, f"{job['id']}-{index}.{stage}")
            data = compiled.asm[stage]
            with open(path, "wb" if isinstance(data, bytes) else "w") as handle:
                handle.write(data)
            files[stage] = path
    metadata = compiled.metadata
    return {
        "index": index, "ok": True, "seconds": round(time.time() - started, 3),
        "constexprs": {k: _show(v) for k, v in constexprs.items()},
        "options": {k: getattr(metadata, k, None) for k in ("num_warps", "num_stages", "num_ctas", "maxnreg")},
        "notes": notes,
        "metadata": {k: getattr(metadata, k, None) for k in ("name", "shared", "tmem_size", "num_warps",
                                                               "num_ctas", "global_scratch_size")},
        "ptxas_log": "\n".join(line for line in log.getvalue().splitlines() if "ptxas" in line or "bytes" in line),
        "files": files,
    }


def main() -> int:
    request = json.load(sys.stdin)
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever else is printed (Triton, the user's module) goes to stderr
    sys.stdout = sys.stderr

    def emit(message: dict) -> None:
        protocol.write(json.dumps(message) + "\n")
        protocol.flush()

    try:
        import triton  # noqa: F401
        from triton import knobs

        with contextlib.suppress(AttributeError):
            knobs.nvidia.dump_ptxas_log = True  # `ptxas -v` output: registers and spills
        spec = importlib.util.spec_from_file_location("kanalyze_scratch", request["module"])
        module = importlib.util.module_from_spec(spec)
        sys.modules["kanalyze_scratch"] = module
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - any failure here is the result
        emit({"event": "fatal", "error": _short(exc), "trace": traceback.format_exc()[-2000:]})
        return 0
    emit({"event": "imported"})
    with open(request["module"], encoding="utf-8") as handle:
        scratch = handle.read()
    import triton.language as tl

    namespace = dict(vars(module))
    namespace.setdefault("triton", triton)
    namespace.setdefault("tl", tl)
    for job in request["jobs"]:
        results = []
        try:
            jit, configs, heuristics = _unwrap(module, job["names"])
        except Exception as exc:
            emit({"event": "done", "id": job["id"], "results": [{"index": 0, "ok": False, "error": _short(exc)}]})
            continue
        dropped = max(0, len(configs) - job["max_configs"])
        for index, config in enumerate(configs[: job["max_configs"]]):
            emit({"event": "config", "id": job["id"], "index": index})
            try:
                result = _compile_one(jit, job, config, heuristics, namespace, job["arch"], request["out"], index)
            except Exception as exc:  # one configuration failing is its result
                result = {"index": index, "ok": False, "error": _short(exc), "row": _error_row(exc, scratch)}
                retry = _half_precision_retry(exc, job)
                if retry is not None:
                    try:
                        result = _compile_one(jit, retry[0], config, heuristics, namespace, job["arch"],
                                              request["out"], index)
                        result["notes"].append(retry[1])
                    except Exception:
                        pass  # the first error is the one to report
            result["of"] = len(configs)
            result["dropped"] = dropped
            results.append(result)
        emit({"event": "done", "id": job["id"], "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
