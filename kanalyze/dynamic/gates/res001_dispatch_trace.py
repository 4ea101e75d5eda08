"""RES001 residency: the work runs in the submitted kernel, on the input's device.

While the candidate runs, the worker records the torch calls its Python code
makes, the Triton launches, the calls into its CUDA C++ extension and the ATen
ops that extension's C++ dispatches, and host transfers (`.cpu()`, `.item()`,
`.numpy()`, `.tolist()`).  The candidate fails when no kernel of its own ran,
when it moved data to the host, or when a library call of the same family as
the reference's main computation (a matmul, a convolution, an LSTM, a softmax, a norm,
a reduction …) ran in PyTorch instead of in the kernel, from Python or from
the extension's C++ (`torch::matmul` in a "kernel").
"""

from __future__ import annotations

from kanalyze.dynamic.gates.base import REFUTED, UNCONFIRMED, Gate, GateContext, run_problem

# The library calls that do a problem's main computation, by family (not glue: views,
# copies, fills, elementwise arithmetic).
_FAMILIES = {
    "matmul": {"mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "bilinear", "einsum", "mv", "addmv",
               "dot", "tensordot", "__matmul__", "__rmatmul__", "chain_matmul"},
    "softmax": {"softmax", "log_softmax", "_softmax", "_log_softmax", "softmin"},
    "normalization": {"layer_norm", "batch_norm", "group_norm", "instance_norm", "rms_norm", "normalize",
                      "local_response_norm"},
    "attention": {"scaled_dot_product_attention", "multi_head_attention_forward"},
    # nn.LSTM / nn.GRU / nn.RNN and their cells, as torch names them (and ATen: `_cudnn_rnn`,
    # `_thnn_fused_lstm_cell`)
    "recurrence": {"lstm", "gru", "rnn_tanh", "rnn_relu", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
                   "rnn", "fused_lstm_cell", "fused_gru_cell"},
    "reduction": {"sum", "mean", "amax", "amin", "max", "min", "prod", "std", "var", "logsumexp", "norm",
                  "argmax", "argmin", "nansum", "nanmean", "std_mean", "var_mean"},
    "scan": {"cumsum", "cumprod", "cummax", "cummin", "logcumsumexp"},
    "sort": {"sort", "argsort", "topk", "kthvalue", "median", "msort"},
    "distance": {"cdist", "pdist", "cosine_similarity", "pairwise_distance"},
    "resampling": {"interpolate", "upsample", "grid_sample", "pixel_shuffle"},
}
_PREFIX_FAMILIES = (("conv", "convolution"), ("max_pool", "pooling"), ("avg_pool", "pooling"),
                    ("adaptive_", "pooling"), ("fft", "fft"))
HOST_CALLS = {"cpu", "numpy", "item", "tolist", "__float__", "__int__"}
# Calls that move, shape or allocate data rather than compute it: never "the work".
GLUE = {"view", "reshape", "contiguous", "empty", "empty_like", "zeros", "zeros_like", "ones", "ones_like", "full",
        "full_like", "new_empty", "new_zeros", "new_ones", "new_full", "clone", "copy_", "to", "cuda", "size", "dim",
        "stride", "numel", "flatten", "unflatten", "unsqueeze", "squeeze", "permute", "transpose", "t", "expand",
        "expand_as", "as_strided", "narrow", "__getitem__", "__setitem__", "fill_", "zero_", "data_ptr",
        "is_contiguous", "element_size", "type", "float", "half", "bfloat16", "double", "detach", "requires_grad_",
        "chunk", "split", "unbind", "cat", "stack", "arange", "tensor", "as_tensor", "empty_strided", "get_device",
        "dtype", "device", "shape", "movedim", "view_as", "reshape_as", "broadcast_to", "__len__", "__iter__"}


def family(call: str) -> str | None:
    for name, members in _FAMILIES.items():
        if call in members:
            return name
    for prefix, name in _PREFIX_FAMILIES:
        if call.startswith(prefix):
            return name
    if call.endswith("_loss") or call in ("cross_entropy", "kl_div", "binary_cross_entropy",
                                           "binary_cross_entropy_with_logits", "nll_loss"):
        return "loss"
    return None


def aten_family(op: str) -> str | None:
    """The family of an ATen op as the dispatcher names it (`mm`, `_softmax`, `native_layer_norm`,
    `cudnn_convolution`, `_native_batch_norm_legit`, `_cudnn_rnn`): what C++ inside an extension computes."""
    name = op.lstrip("_")
    for prefix in ("native_", "cudnn_", "miopen_", "mkldnn_", "thnn_"):
        if name.startswith(prefix):
            name = name[len(prefix):]
    if name.startswith("batch_norm") or name.startswith("group_norm") or name.startswith("layer_norm"):
        return "normalization"
    return family(name)


class DispatchTrace(Gate):
    code = "RES001"
    name = "res001-dispatch-trace"
    summary = "torch calls, kernel launches and host transfers recorded while the candidate runs"
    needs_float64 = False   # (compares no value with the float64 reference)

    def plan(self, ctx: GateContext):
        return [ctx.case(self, "trace", record_ops=True)]

    def judge(self, ctx: GateContext, results):
        result = results[0]
        if not result.candidate_ok or not result.runs or not result.runs[0].ok:
            return self.verdict(UNCONFIRMED, f"the candidate did not run: {run_problem(result)}", [result.case])
        run = result.runs[0].meta
        calls, launches = run.get("ops", {}), run.get("launches", {})
        # A CUDA C++ candidate's kernels are its extension's functions (extensions.py counts the
        # calls); the ATen ops its C++ dispatched inside them are recorded apart.
        extension, inside = run.get("extension_calls") or {}, run.get("extension_ops") or {}
        transfers = {f".{c}()": n for c, n in calls.items() if c in HOST_CALLS}
        reference_calls = result.reference.meta.get("ops") or {}
        reference_families = {family(c) for c in reference_calls} - {None}
        library = sorted(c for c in calls if family(c) and (family(c) in reference_families or not reference_calls))
        if not reference_families:
            # An elementwise problem (relu, gelu, a scale): its own ops are its main computation,
            # and a candidate that calls them in PyTorch beside a decoy kernel does the work there.
            library = sorted(set(library) | {c for c in calls if c in reference_calls and c not in GLUE})
        in_extension = sorted(op for op in inside if (aten_family(op) and (aten_family(op) in reference_families
                                                                          or not reference_calls))
                              or (not reference_families and op in reference_calls and op not in GLUE))
        trace = {"torch_calls": calls, "kernel_launches": launches, "extension_calls": extension,
                 "extension_aten_ops": inside, "host_transfers": transfers, "reference_calls": reference_calls}
        problems = []
        if ctx.cuda_cpp and not launches and not extension:
            # (its extension registers operators rather than Python functions: nothing to count)
            if not library and not transfers and not in_extension:
                return self.verdict(UNCONFIRMED, "the candidate's CUDA C++ kernels could not be counted (its "
                                    "extension has no Python functions kanalyze counts calls of); no reference "
                                    "library call and no host transfer ran", [result.case], **trace)
        elif not launches and not any(extension.values()):
            problems.append("no custom kernel ran")
        if library:
            names = ", ".join(f"torch {c} ({family(c) or 'the reference op itself'})" for c in library)
            problems.append(f"the reference's main computation ran in PyTorch: {names}")
        if in_extension:
            names = ", ".join(f"aten {op} ({aten_family(op) or 'the reference op itself'})" for op in in_extension)
            called = ", ".join(sorted(k for k, v in extension.items() if v))
            problems.append(f"the candidate's CUDA C++ extension ({called}) had ATen do the "
                            f"reference's main computation: {names}")
        if transfers:
            problems.append("host transfers: " + ", ".join(f"{k} ×{v}" for k, v in sorted(transfers.items())))
        if problems:
            return self.confirmed("; ".join(problems), result, **trace)
        kernels = ", ".join(f"{k} ×{v}" for k, v in sorted({**launches, **extension}.items()) if v)
        return self.verdict(REFUTED, f"the work ran in the candidate's kernels ({kernels}); no reference library op "
                                     "and no host transfer", [result.case], **trace)
