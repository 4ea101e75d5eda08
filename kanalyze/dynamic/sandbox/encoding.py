"""A case's values on their way between processes (worker side; imports torch).

`encode_list` describes a list of values (the problem's inputs, its init inputs) so that the
other side can rebuild it, its tensors put into the case's arrays (device_share.put: kept on
the device on a GPU, saved on the CPU); `encode_output` does the same for what a call
returned, flattened into leaves.  `decode_list` and `decode_tensor` rebuild them there.
`plain_tensor` reads a returned tensor without calling a subclass's methods.
"""

from __future__ import annotations

import json

import torch

from kanalyze.dynamic.sandbox.device_share import put
from kanalyze.dynamic.sandbox.transport import dtype_name, flatten_value, numpy_to_tensor


def encode_list(values: list, prefix: str, arrays: dict, keep: bool = True) -> list[dict]:
    """How to rebuild `values` on the other side; their tensors go into `arrays` unless not `keep`
    (inputs handed over when the candidate's case starts: delivery.py)."""
    described = []
    for i, value in enumerate(values):
        if isinstance(value, torch.Tensor):
            key = f"{prefix}{i}"
            if keep:
                put(arrays, key, value)
            described.append({"kind": "tensor", "dtype": dtype_name(value.dtype), "key": key})
        else:
            try:
                json.dumps(value)
            except TypeError:
                value = repr(value)
                described.append({"kind": "unsupported", "value": value})
                continue
            described.append({"kind": "value", "value": value})
    return described


def decode_list(described: list[dict], arrays, device: str) -> list:
    out = []
    for item in described:
        if item["kind"] == "tensor":
            out.append(decode_tensor(arrays[item["key"]], item["dtype"], device))
        elif item["kind"] == "value":
            out.append(item["value"])
        else:
            raise TypeError(f"an input of the problem cannot cross processes: {item['value']}")
    return out


def decode_tensor(value, dtype: str, device: str):
    """An array that crossed as a numpy array (a file), or as a device tensor already (handed over
    there: delivery.py), as a tensor on `device`."""
    return value.to(device) if isinstance(value, torch.Tensor) else numpy_to_tensor(value, dtype, device)


def plain_tensor(value):
    """A returned tensor as a plain `torch.Tensor`, read without calling any method of a subclass:
    a subclass that computes its values when they are read (detach, clone, numpy ...) is judged
    by what it holds.  One that cannot be read so (a wrapper without storage) is an error."""
    if type(value) is torch.Tensor:
        return value
    with torch._C.DisableTorchFunctionSubclass():
        plain = torch.Tensor.clone(value)
    if type(plain) is not torch.Tensor:
        raise TypeError(f"returned a {type(value).__name__}, a tensor subclass that is not a plain tensor's "
                        "values when read")
    return plain


def encode_output(value, prefix: str, arrays: dict) -> dict:
    return encode_leaves(*flatten_value(value), prefix, arrays)


def encode_leaves(structure: str, leaves: list, prefix: str, arrays: dict) -> dict:
    dtypes, nbytes, shapes = [], [], []
    for i, leaf in enumerate(leaves):
        nbytes.append(put(arrays, f"{prefix}{i}", leaf))
        dtypes.append(dtype_name(leaf.dtype))
        shapes.append(list(leaf.shape))
    return {"structure": structure, "dtypes": dtypes, "prefix": prefix, "nbytes": nbytes, "shapes": shapes}
