"""What a worker writes its records and arrays with, out of the candidate's easy reach (stdlib, numpy).

Everything a worker reports is written in the candidate's process after the candidate's
code ran there, so whatever that code replaced is what the writing runs through: a
candidate that replaced `json.dump` rewrote the worker's record of its call (its torch
calls dropped, a kernel launch made up: RES001 refuted), one that replaced
`numpy.save` or `torch.Tensor.numpy` could put back the inputs it overwrote before
MEM002 saw them.  So the worker writes with what this module took when it was imported,
before any problem or candidate code: builtins and C functions held in its own globals
(`json`'s encoder and `_json`'s encoder type are mutable, so records are encoded here),
file calls from `os`, and numpy's buffer protocol for arrays.  Replacing names in
`json`, `numpy`, `os`, `builtins` or torch's `Tensor` class then changes nothing the
worker writes.  What stays reachable is this module's own objects, through `gc` or frames
(reads the audit hook records as INT001: integrity.py) or the closures of kanalyze's
hooks (docs/worker-protocol.md, known gaps).
"""

from __future__ import annotations

import math
import os

import numpy as np

# Taken now, before any candidate code: module attributes can be replaced later, these cannot.
from _json import encode_basestring_ascii as _quote   # noqa: E402  (a builtin function: immutable)

_open, _write, _close, _replace = os.open, os.write, os.close, os.replace
_dict, _list, _tuple, _str, _int, _float, _bool = dict, list, tuple, str, int, float, bool
_isinstance, _type, _repr, _len, _memoryview, _enumerate = isinstance, type, repr, len, memoryview, enumerate
_isfinite = math.isfinite
_float_repr, _int_repr = float.__repr__, int.__repr__
_contiguous, _bytes_dtype = np.ascontiguousarray, np.uint8
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)


def dumps(value) -> str:
    """`value` as JSON, as `json.dumps` writes it (NaN and Infinity included): dicts with string
    keys, lists and tuples, strings, numbers, booleans and None; anything else raises TypeError."""
    parts: list = []
    _encode(value, parts)
    return "".join(parts)


def _encode(value, parts: list) -> None:
    kind = _type(value)
    if value is None:
        parts.append("null")
    elif value is True or value is False:
        parts.append("true" if value else "false")
    elif kind is _str or _isinstance(value, _str):
        parts.append(_quote(_str.__str__(value)))
    elif kind is _int or (_isinstance(value, _int) and not _isinstance(value, _bool)):
        parts.append(_int_repr(value))
    elif kind is _float or _isinstance(value, _float):
        number = _float(value)
        parts.append(_float_repr(number) if _isfinite(number) else
                     "NaN" if number != number else "Infinity" if number > 0 else "-Infinity")
    elif kind is _dict or _isinstance(value, _dict):
        parts.append("{")
        for i, (key, item) in _enumerate(_dict.items(value)):
            if not _isinstance(key, _str):
                key = _key(key)
            parts.append(", " if i else "")
            parts.append(_quote(_str.__str__(key)))
            parts.append(": ")
            _encode(item, parts)
        parts.append("}")
    elif kind in (_list, _tuple) or _isinstance(value, (_list, _tuple)):
        parts.append("[")
        items = _list.__iter__(value) if _isinstance(value, _list) else _tuple.__iter__(value)
        for i, item in _enumerate(items):
            parts.append(", " if i else "")
            _encode(item, parts)
        parts.append("]")
    else:
        raise TypeError(f"Object of type {kind.__name__} is not JSON serializable")


def _key(key) -> str:
    """A non-string dict key as `json.dumps` writes it."""
    if key is None:
        return "null"
    if key is True or key is False:
        return "true" if key else "false"
    if _isinstance(key, _int):
        return _int_repr(key)
    if _isinstance(key, _float):
        return _float_repr(_float(key))
    raise TypeError(f"keys must be str, int, float, bool or None, not {_type(key).__name__}")


def write_text(path: str, text: str) -> None:
    """Write `text` (UTF-8) to `path`, through os's own calls as taken at import."""
    _write_all(path, [_str.encode(text, "utf-8")])


def save_npy(path: str, array: np.ndarray) -> None:
    """`array` as a .npy file (version 1.0, C order), as `numpy.save` writes it without pickles."""
    shape = array.shape   # (a 0-d array stays 0-d: `ascontiguousarray` makes it 1-d)
    array = _contiguous(array)
    if array.dtype.hasobject:
        raise ValueError("object arrays are not written")
    header = "{'descr': %s, 'fortran_order': False, 'shape': %s, }" % (_repr(array.dtype.str), _repr(shape))
    # magic, version 1.0, header length; the header padded with spaces to a multiple of 64, then '\n'
    padding = 64 - (10 + _len(header) + 1) % 64
    header = header + " " * (padding % 64) + "\n"
    prefix = b"\x93NUMPY\x01\x00" + _len(header).to_bytes(2, "little")
    _write_all(path, [prefix, _str.encode(header, "latin1"), _memoryview(array.reshape(-1).view(_bytes_dtype))
                      if array.size else b""])


def _write_all(path: str, chunks: list) -> None:
    fd = _open(path, _WRITE_FLAGS, 0o600)
    try:
        for chunk in chunks:
            view = _memoryview(chunk).cast("B")
            while _len(view):
                view = view[_write(fd, view):]
    finally:
        _close(fd)
