"""Random identifiers for the paths every message takes: version-4 UUIDs from a buffer of the OS's
randomness.

`uuid.uuid4()` asks the kernel for 16 bytes each time (`os.urandom`, a `getrandom` system call that
also lets go of the GIL, so under load the event loop may wait for a thread to hand it back). An
answer takes five or so ids; here one call to `os.urandom` serves `BATCH` of them. The bytes are
the same (the kernel's cryptographic generator), so an id is as unguessable as `uuid.uuid4()`'s
and of the same form (version 4, RFC 4122 variant). A forked child never hands out its parent's
ids: its buffer starts empty. Safe from any thread.
"""

from __future__ import annotations

import os
import threading
from uuid import UUID

__all__ = ["BATCH", "random_hex", "random_uuid"]

BATCH = 256
_SIZE = 16 * BATCH
# Version 4 in bits 76-79, the RFC 4122 variant (10) in bits 62-63.
_KEEP = ~((0xF000 << 64) | (0xC000 << 48)) & ((1 << 128) - 1)
_SET = (4 << 76) | (0x8000 << 48)


class _Buffer:
    __slots__ = ("bytes", "lock", "next")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bytes = b""
        self.next = 0

    def take(self) -> int:
        with self.lock:
            start = self.next
            if start >= len(self.bytes):
                self.bytes, start = os.urandom(_SIZE), 0
            self.next = start + 16
            return int.from_bytes(self.bytes[start : start + 16])

    def forget(self) -> None:
        self.lock = threading.Lock()  # a lock held at the fork stays held in the child
        self.bytes, self.next = b"", 0


_buffer = _Buffer()
os.register_at_fork(after_in_child=_buffer.forget)


def random_uuid() -> UUID:
    """A new random (version 4) UUID, as `uuid.uuid4()` makes."""
    return UUID(int=_buffer.take() & _KEEP | _SET)


def random_hex() -> str:
    """A new random (version 4) UUID's 32 hexadecimal digits, as `uuid.uuid4().hex` gives."""
    return f"{_buffer.take() & _KEEP | _SET:032x}"
