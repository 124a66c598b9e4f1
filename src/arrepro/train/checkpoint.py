"""The checkpoint file: a fixed-length header with the sha256 and size of what follows, then
torch.save's bytes. Written atomically (``files.atomic_write``); read back only if the bytes
match their header, so a truncated or garbled checkpoint is reported (CorruptCheckpoint), never
resumed."""
from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import torch

from arrepro.files import atomic_write

HEADER = "arrepro-checkpoint sha256 {digest:64} bytes {size:020d}\n"
HEADER_LEN = len(HEADER.format(digest="", size=0))


class CorruptCheckpoint(Exception):
    """A checkpoint that fails its checksum or cannot be read (the message says why)."""


class _HashingWriter:
    """A file that torch.save streams into, hashing what it writes (no copy in memory)."""

    def __init__(self, f):
        self.f, self.sha, self.size = f, hashlib.sha256(), 0

    def write(self, b) -> int:
        self.sha.update(b)
        self.size += len(b)
        return self.f.write(b)

    def flush(self) -> None:
        self.f.flush()


class _Window(io.RawIOBase):
    """A read-only view of a file from ``start`` on (torch.load reads the payload after the header)."""

    def __init__(self, f, start: int):
        super().__init__()
        self.f, self.start = f, start
        f.seek(start)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, pos: int, whence: int = 0) -> int:
        return self.f.seek(pos + self.start if whence == 0 else pos, whence) - self.start

    def tell(self) -> int:
        return self.f.tell() - self.start

    def readinto(self, b) -> int:
        return self.f.readinto(b)


def save(path: Path, obj) -> None:
    """torch.save ``obj`` atomically, after a header with the sha256 and size of its bytes."""
    def write(tmp: Path):
        with open(tmp, "wb") as f:
            f.write(b"\0" * HEADER_LEN)  # the header, once the digest is known
            w = _HashingWriter(f)
            torch.save(obj, w)
            f.seek(0)
            f.write(HEADER.format(digest=w.sha.hexdigest(), size=w.size).encode())

    atomic_write(path, write)


def load(path: Path, device):
    """The contents of a checkpoint written by ``save``, checked against its header's size and
    sha256 before use; CorruptCheckpoint says what is wrong."""
    with open(path, "rb") as f:
        head = f.read(HEADER_LEN).decode("ascii", "replace").split()
        if len(head) != 5 or head[:2] != ["arrepro-checkpoint", "sha256"] or head[3] != "bytes" \
                or not head[4].isdigit():
            raise CorruptCheckpoint("no valid checksum header")
        size = f.seek(0, os.SEEK_END) - HEADER_LEN
        if size != int(head[4]):
            raise CorruptCheckpoint(f"{size} bytes after the header, {int(head[4])} written: truncated or extended")
        f.seek(HEADER_LEN)
        if hashlib.file_digest(f, "sha256").hexdigest() != head[2]:
            raise CorruptCheckpoint("sha256 of its contents differs from the one written with it")
        try:
            return torch.load(_Window(f, HEADER_LEN), map_location=device, weights_only=False)
        except Exception as e:  # a checksum that matches bytes torch cannot read: not ours either
            raise CorruptCheckpoint(f"unreadable: {e}") from e
