"""A GGUF file's metadata and tensor directory, read without a Python object per array element.

The gguf package's GGUFReader builds a numpy memmap view for every part of every field: ~455,000 objects and
~13 s for a 151,936-token vocabulary. Here numbers and number arrays are read with struct/numpy, string arrays
become one list of str, and tensor data is read with one pread per tensor into memory the caller owns: the
file is never mapped, so a file cut short is an error at open or read, never a SIGBUS, and its pages are not
counted in the process' resident memory.
"""
from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
# GGUF value types -> struct format (scalars); 8 is a string, 9 an array
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
NUMPY = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32, 6: np.float32,
         7: np.bool_, 10: np.uint64, 11: np.int64, 12: np.float64}
STRING, ARRAY = 8, 9
# ggml type id -> (name, elements per block, bytes per block), the types a model file may hold
GGML_TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
              7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36), 10: ("Q2_K", 256, 84),
              11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210),
              15: ("Q8_K", 256, 292), 16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98),
              19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110), 22: ("IQ2_S", 256, 82),
              23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8),
              28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54),
              35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17)}


class GGUFFormatError(ValueError):
    """The bytes are not a well-formed GGUF file (bad magic, cut short, impossible sizes)."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]     # ggml order: shape[0] is the row length
    type_name: str
    offset: int                # absolute offset of its data in the file
    n_elements: int
    n_bytes: int


class _Cursor:
    """Reads little-endian values from a bytes buffer, struct errors turned into GGUFFormatError."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, fmt: str):
        size = struct.calcsize("<" + fmt)
        if self.pos + size > len(self.data):
            raise GGUFFormatError("cut short inside its metadata")
        value = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += size
        return value if len(value) > 1 else value[0]

    def string(self) -> str:
        n = self.take("Q")
        if self.pos + n > len(self.data):
            raise GGUFFormatError("cut short inside its metadata")
        text = self.data[self.pos:self.pos + n].decode("utf-8", errors="replace")
        self.pos += n
        return text

    def value(self, kind: int):
        if kind in SCALARS:
            return self.take(SCALARS[kind])
        if kind == STRING:
            return self.string()
        if kind == ARRAY:
            item, count = self.take("I"), self.take("Q")
            if item in NUMPY:
                size = np.dtype(NUMPY[item]).itemsize * count
                if self.pos + size > len(self.data):
                    raise GGUFFormatError("cut short inside its metadata")
                array = np.frombuffer(self.data, NUMPY[item], count, self.pos).copy()
                self.pos += size
                return array
            if item == STRING and count > LazyStrings.THRESHOLD:
                start = self.pos
                self.pos = LazyStrings.skip(self.data, self.pos, count)
                return LazyStrings(self.data, start, count)
            return [self.value(item) for _ in range(count)]
        raise GGUFFormatError(f"unknown metadata value type {kind}")


class LazyStrings(Sequence):
    """A long string array (a vocabulary, its merges), decoded on first use: loading weights needs neither."""

    THRESHOLD = 4096
    _LENGTH = struct.Struct("<Q")

    def __init__(self, data: bytes, start: int, count: int):
        self._data, self._start, self._count, self._items = data, start, count, None

    @classmethod
    def skip(cls, data: bytes, pos: int, count: int) -> int:
        """The offset after `count` strings starting at `pos` (each a u64 length and its bytes)."""
        unpack, end = cls._LENGTH.unpack_from, len(data)
        for _ in range(count):
            if pos + 8 > end:
                raise GGUFFormatError("cut short inside its metadata")
            pos += 8 + unpack(data, pos)[0]
        if pos > end:
            raise GGUFFormatError("cut short inside its metadata")
        return pos

    def _decoded(self) -> list[str]:
        if self._items is None:
            c = _Cursor(self._data)
            c.pos = self._start
            self._items = [c.string() for _ in range(self._count)]
            self._data = None
        return self._items

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index):
        return self._decoded()[index]

    def __eq__(self, other) -> bool:
        return list(self._decoded()) == list(other)


class GGUFFile:
    """fields: key -> int/float/bool/str, numpy array (number arrays) or list (string arrays);
    tensors: the tensor directory in file order. `read(tensor)` gives its bytes."""

    HEADER_READ = 1 << 24   # metadata of real files is a few MB; read more only when it is larger

    def __init__(self, path: Path):
        self.path = Path(path)
        self.size = self.path.stat().st_size
        with open(self.path, "rb") as handle:
            data = handle.read(self.HEADER_READ)
            while True:
                try:
                    self._parse(data)
                    break
                except GGUFFormatError:
                    if len(data) >= self.size:
                        raise
                    data += handle.read(len(data))   # metadata longer than read so far: double and retry

    def _parse(self, data: bytes) -> None:
        if data[:4] != MAGIC:
            raise GGUFFormatError("not a GGUF file")
        c = _Cursor(data)
        c.pos = 4
        self.version, n_tensors, n_fields = c.take("I"), c.take("Q"), c.take("Q")
        if self.version < 2 or n_tensors > 1 << 24 or n_fields > 1 << 24:
            raise GGUFFormatError(f"GGUF version {self.version} with {n_tensors} tensors is not one llmchat reads")
        self.fields = {}
        for _ in range(n_fields):
            key = c.string()
            self.fields[key] = c.value(c.take("I"))
        infos = []
        for _ in range(n_tensors):
            name, dims = c.string(), c.take("I")
            if dims > 8:
                raise GGUFFormatError(f"tensor {name} has {dims} dimensions")
            shape = tuple(c.take("Q") for _ in range(dims))
            infos.append((name, shape, c.take("I"), c.take("Q")))
        alignment = int(self.fields.get("general.alignment", DEFAULT_ALIGNMENT)) or DEFAULT_ALIGNMENT
        start = (c.pos + alignment - 1) // alignment * alignment
        self.tensors = [self._tensor(start, *info) for info in infos]

    def _tensor(self, start: int, name: str, shape: tuple[int, ...], type_id: int, offset: int) -> TensorInfo:
        type_name, elems, size = GGML_TYPES.get(type_id, (f"type {type_id}", 1, 0))
        n_elements = int(np.prod(shape, dtype=np.int64)) if shape else 1
        n_bytes = n_elements // elems * size
        if size and start + offset + n_bytes > self.size:
            raise GGUFFormatError(f"tensor {name} ends past the end of the file")
        return TensorInfo(name, shape, type_name, start + offset, n_elements, n_bytes)

    def field(self, key: str):
        return self.fields.get(key)

    def read(self, tensor: TensorInfo, buffer: np.ndarray | None = None, start: int = 0,
             length: int | None = None) -> np.ndarray:
        """The tensor's raw bytes (uint8), or `length` of them from `start`, read into a fresh array, or into the
        start of `buffer` (uint8, long enough: one buffer reused for many reads faults its pages in once)."""
        length = tensor.n_bytes - start if length is None else length
        if start < 0 or length < 0 or start + length > tensor.n_bytes:
            raise ValueError(f"bytes [{start}, {start + length}) are not inside tensor {tensor.name}")
        out = np.empty(length, dtype=np.uint8) if buffer is None else buffer[:length]
        with open(self.path, "rb", buffering=0) as handle:
            handle.seek(tensor.offset + start)
            view, done = memoryview(out), 0
            while done < length:
                got = handle.readinto(view[done:])
                if not got:
                    raise GGUFFormatError(f"cut short inside tensor {tensor.name}")
                done += got
        return out

    def read_floats(self, name: str) -> np.ndarray | None:
        """A small F32 tensor by name (rope factors), or None."""
        for t in self.tensors:
            if t.name == name and t.type_name == "F32":
                return self.read(t).view(np.float32)
        return None


def open_gguf(path: Path) -> GGUFFile:
    return GGUFFile(Path(os.fspath(path)))
