"""Token estimates for the context budget (SPEC §19): tiktoken's `o200k_base`.

tiktoken downloads its tables on first use, and Vernis runs offline; the `bpe-openai` wheel ships
the same `o200k_base` table. `load()` puts it where tiktoken's own cache looks for it (its
`TIKTOKEN_CACHE_DIR`, else tiktoken's default folder), once, and tiktoken checks its SHA-256 as it
would a download. Where that cannot be done (the wheel missing, the cache switched off with an empty
`TIKTOKEN_CACHE_DIR`, a read-only folder), estimates fall back to four characters a token, logged
once.

`load()` takes about half a second of CPU: call it off the event loop at start-up
(`vernis.runtime`); `count` loads it on first use otherwise.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import logging
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

__all__ = ["CHARS_PER_TOKEN", "ENCODING", "count", "load"]

logger = logging.getLogger("vernis.tokens")

ENCODING = "o200k_base"
# The estimate's rule of thumb when the table cannot be had.
CHARS_PER_TOKEN = 4
# The address tiktoken reads the table from: its cache file is named after it.
_TABLE_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"

_lock = threading.Lock()
_counter: Callable[[str], int] | None = None


def _by_characters(text: str) -> int:
    return -(-len(text) // CHARS_PER_TOKEN)


def _cache_dir() -> Path | None:
    """The folder tiktoken's `read_file_cached` looks in; None when its cache is switched off."""
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        folder = os.environ["TIKTOKEN_CACHE_DIR"]
    elif "DATA_GYM_CACHE_DIR" in os.environ:
        folder = os.environ["DATA_GYM_CACHE_DIR"]
    else:
        return Path(tempfile.gettempdir()) / "data-gym-cache"
    return Path(folder) if folder else None


def _seed_cache() -> None:
    """The wheel's table, uncompressed, under the name tiktoken's cache gives the download."""
    folder = _cache_dir()
    if folder is None:
        raise LookupError("TIKTOKEN_CACHE_DIR is empty: tiktoken's cache is switched off")
    target = folder / hashlib.sha1(_TABLE_URL.encode()).hexdigest()
    if target.exists():
        return
    spec = importlib.util.find_spec("bpe_openai")  # found, not imported: its native library is large
    if spec is None or not spec.submodule_search_locations:
        raise LookupError("the bpe-openai package is not installed")
    source = Path(next(iter(spec.submodule_search_locations))) / "data" / f"{ENCODING}.tiktoken.gz"
    folder.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    partial.write_bytes(gzip.decompress(source.read_bytes()))
    partial.replace(target)  # atomic: another process reading the cache never sees half a table


def load() -> Callable[[str], int]:
    """The token counter, made once per process (thread-safe); four characters a token when the
    table cannot be had."""
    global _counter
    with _lock:
        if _counter is None:
            try:
                _seed_cache()
                import tiktoken

                encoding = tiktoken.get_encoding(ENCODING)
            except Exception as exc:
                logger.warning("token estimates fall back to %d characters a token: %s", CHARS_PER_TOKEN, exc)
                _counter = _by_characters
            else:

                def _count(text: str) -> int:
                    return len(encoding.encode_ordinary(text))

                _counter = _count
        return _counter


def count(text: str) -> int:
    """The tokens `text` takes, estimated with `o200k_base`."""
    if not text:
        return 0
    return (_counter or load())(text)
