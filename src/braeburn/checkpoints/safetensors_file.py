"""The safetensors format, written and read with torch alone: model weights that load without unpickling.

A safetensors file is an 8-byte little-endian header length, a JSON header (each tensor's dtype, shape
and byte range, and ``__metadata__``: strings), then the tensors' bytes back to back
(https://huggingface.co/docs/safetensors). braeburn writes it itself rather than through the
``safetensors`` package: the core install keeps torch as its only numeric dependency (the package's
torch writer needs numpy), the tensors stream one at a time into the file (no copy of the whole model
in memory), and the bytes go through a Python file object, whose errors (a full disk) are OSError like
every other checkpoint write. Files written here load with ``safetensors.torch.load_file`` and
Transformers' ``from_pretrained`` (tested).
"""

from __future__ import annotations

import ctypes
import json
import os
import struct
import sys
from pathlib import Path
from typing import Any, BinaryIO

import torch

from ..errors import UnsafeFileError

DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
          torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
          torch.bool: "BOOL", torch.complex64: "C64"}
DTYPES.update({getattr(torch, name): code for name, code in (
    ("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2"), ("uint16", "U16"), ("uint32", "U32"),
    ("uint64", "U64")) if hasattr(torch, name)})
_BY_CODE = {code: dtype for dtype, code in DTYPES.items()}
MAX_HEADER = 100 << 20  # the limit the safetensors package itself reads


def can_hold(state: dict[str, Any]) -> bool:
    """Whether every value is a dense tensor of a dtype the format names (a little-endian host writes them)."""
    return sys.byteorder == "little" and all(
        isinstance(value, torch.Tensor) and value.layout == torch.strided and not value.is_quantized
        and value.dtype in DTYPES for value in state.values())


def write(tensors: dict[str, torch.Tensor], handle: BinaryIO, metadata: dict[str, str]) -> None:
    """``tensors`` (sharing no memory: the caller drops aliases) into ``handle``, one tensor at a time."""
    header: dict[str, Any] = {"__metadata__": metadata}
    offset = 0
    for name, tensor in tensors.items():
        size = tensor.numel() * tensor.element_size()
        header[name] = {"dtype": DTYPES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the tensors' bytes start 8-aligned, as the safetensors package writes them
    handle.write(struct.pack("<Q", len(text)) + text)
    for tensor in tensors.values():
        host = tensor.detach().to("cpu").contiguous()  # a device tensor: one copy to the host, this tensor only
        if host.numel():  # the tensor's own memory, not a copy of it as bytes
            handle.write((ctypes.c_char * (host.numel() * host.element_size())).from_address(host.data_ptr()))


def _refuse(path: Path, reason: str) -> UnsafeFileError:
    return UnsafeFileError(f"{path} is not a safetensors file that braeburn can read ({reason}), so nothing was "
                           "loaded from it. A file written by save_state() always is: delete this checkpoint, or "
                           "resume from another one.")


def read(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors and metadata of the safetensors file ``path``; :class:`UnsafeFileError` when it is not one."""
    with open(path, "rb") as handle:  # read once, into the buffer the tensors then view (no second copy)
        data = bytearray(os.fstat(handle.fileno()).st_size)
        if handle.readinto(data) != len(data):
            raise _refuse(path, "it changed while being read")
    if len(data) < 8:
        raise _refuse(path, f"{len(data)} bytes, shorter than its header length")
    (length,) = struct.unpack("<Q", data[:8])
    if length > min(MAX_HEADER, len(data) - 8):
        raise _refuse(path, f"its header claims {length:,} bytes")
    try:
        header = json.loads(data[8:8 + length].decode("utf-8"))
    except ValueError as error:
        raise _refuse(path, f"its header is not JSON: {error}") from None
    if not isinstance(header, dict):
        raise _refuse(path, "its header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise _refuse(path, "its __metadata__ is not a table of strings")
    start, tensors = 8 + length, {}
    for name, entry in header.items():
        tensors[name] = _tensor(path, data, start, name, entry)
    return tensors, metadata


def _tensor(path: Path, data: bytearray, start: int, name: str, entry: Any) -> torch.Tensor:
    try:
        dtype, shape, (begin, end) = _BY_CODE[entry["dtype"]], [int(n) for n in entry["shape"]], entry["data_offsets"]
    except (KeyError, TypeError, ValueError):
        raise _refuse(path, f"the entry of {name!r} is not a dtype, shape and byte range braeburn knows") from None
    count = 1
    for n in shape:
        count *= n
    element = torch.empty((), dtype=dtype).element_size()
    if not (isinstance(begin, int) and isinstance(end, int) and 0 <= begin <= end <= len(data) - start
            and min(shape, default=0) >= 0 and end - begin == count * element):
        raise _refuse(path, f"the byte range of {name!r} does not fit its shape or the file")
    if count == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(data, dtype=dtype, count=count, offset=start + begin).reshape(shape)


__all__ = ["DTYPES", "can_hold", "read", "write"]
