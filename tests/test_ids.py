"""`vernis.ids`: random version-4 UUIDs from a buffer of the OS's randomness."""

from __future__ import annotations

import multiprocessing
import threading
import uuid

from vernis.ids import BATCH, random_hex, random_uuid


def test_ids_are_random_version_4_uuids_like_uuid4s() -> None:
    """Every id is a version-4, RFC 4122 UUID; thousands (several buffers) are all different."""
    ids = [random_uuid() for _ in range(10 * BATCH)]
    assert all(value.version == 4 and value.variant == uuid.RFC_4122 for value in ids)
    assert len(set(ids)) == len(ids)
    hexes = [random_hex() for _ in range(2 * BATCH)]
    assert all(uuid.UUID(text).version == 4 and uuid.UUID(text).hex == text for text in hexes)
    assert len(set(hexes)) == len(hexes)
    # The 122 random bits do vary: each of them is set in some id and clear in another.
    ones = [sum(value.int >> bit & 1 for value in ids) for bit in range(128)]
    fixed = {76, 77, 78, 79, 62, 63}
    assert all(0 < count < len(ids) for bit, count in enumerate(ones) if bit not in fixed)


def test_threads_taking_ids_at_once_never_get_the_same_one() -> None:
    """Four threads taking ids together (across refills of the buffer) get distinct ones."""
    taken: list[list[uuid.UUID]] = [[] for _ in range(4)]
    start = threading.Barrier(4)

    def take(into: list[uuid.UUID]) -> None:
        start.wait()
        into.extend(random_uuid() for _ in range(3 * BATCH))

    threads = [threading.Thread(target=take, args=(into,)) for into in taken]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [value for into in taken for value in into]
    assert len(set(every)) == len(every) == 4 * 3 * BATCH


def _child_ids(pipe: multiprocessing.connection.Connection) -> None:
    pipe.send([random_hex() for _ in range(BATCH)])
    pipe.close()


def test_a_forked_child_never_hands_out_its_parents_ids() -> None:
    """After a fork, the child's ids are none of those the parent's buffer still holds."""
    random_hex()  # the parent's buffer is filled, BATCH - 1 ids left in it
    context = multiprocessing.get_context("fork")
    receiving, sending = context.Pipe(duplex=False)
    child = context.Process(target=_child_ids, args=(sending,))
    child.start()
    theirs = set(receiving.recv())
    child.join(10)
    ours = {random_hex() for _ in range(BATCH)}
    assert child.exitcode == 0
    assert len(theirs) == BATCH
    assert not theirs & ours
