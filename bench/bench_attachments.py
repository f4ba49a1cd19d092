"""Memory of uploads (issue 28): ten 10 MiB files uploaded at once to one `vernis serve` process.

    python bench/bench_attachments.py [--uploads 10]

`vernis serve --demo` runs as its own process on SQLite with the default local attachment
directory; the uploads are real multipart POSTs over HTTP from httpx, all at once, each from its own
member (so no quota is reached), half of them PNG images of random pixels and half text files, each
just under 10 MiB and different (nothing is deduplicated). The server's resident set (VmRSS in
/proc) is sampled every 10 ms from before the first byte to after the last answer; the figure is its
growth at the peak, after one small upload has warmed the process up (imports, first connections).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from PIL import Image

from vernis.identity import issue_token

ROOT = Path(__file__).resolve().parent.parent
SECRET = "bench-secret-that-is-long-enough-for-hs256"
MIB = 1024 * 1024


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def files(count: int) -> list[tuple[str, bytes]]:
    made = []
    for n in range(count):
        if n % 2 == 0:
            side = 1800  # 1800 x 1800 x 3 random bytes: a PNG of about 9.3 MiB
            image = Image.frombytes("RGB", (side, side), os.urandom(side * side * 3))
            buffer = io.BytesIO()
            image.save(buffer, "PNG", compress_level=1)
            made.append((f"photo-{n}.png", buffer.getvalue()))
        else:
            line = secrets.token_hex(40).encode() + b"\n"
            made.append((f"export-{n}.csv", line * ((10 * MIB - 4096) // len(line))))
    return made


def start_server(port: int, env: dict[str, str], directory: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "vernis", "serve", "--demo", "--scripted-model", "--port", str(port)],
        env=env,
        cwd=directory,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def main(uploads: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        port = 18000 + os.getpid() % 1000
        env = os.environ | {
            "VERNIS_DATABASE_URL": f"sqlite+aiosqlite:///{directory}/bench.db",
            "VERNIS_JWT_SECRET": SECRET,
            "VERNIS_LOG_LEVEL": "WARNING",
        }
        server = start_server(port, env, directory)
        try:
            base = f"http://127.0.0.1:{port}"
            async with httpx.AsyncClient(base_url=base, timeout=120) as http:
                for _ in range(300):
                    try:
                        if (await http.get("/readyz")).status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    await asyncio.sleep(0.1)
                tokens = [
                    issue_token(SECRET, sub=f"bench-{n}", org="acme", role="owner", ttl=600)
                    for n in range(uploads + 1)
                ]
                warm = await http.post(
                    "/api/assistant/attachments",
                    headers={"Authorization": f"Bearer {tokens[-1]}"},
                    files={"file": ("warm.png", files(1)[0][1])},
                )
                assert warm.status_code == 201, warm.text
                payloads = files(uploads)
                await asyncio.sleep(1)
                before = rss_kib(server.pid)
                peak = before
                done = False

                async def sample() -> None:
                    nonlocal peak
                    while not done:
                        peak = max(peak, rss_kib(server.pid))
                        await asyncio.sleep(0.01)

                sampler = asyncio.create_task(sample())
                started = time.monotonic()
                answers = await asyncio.gather(
                    *(
                        http.post(
                            "/api/assistant/attachments",
                            headers={"Authorization": f"Bearer {tokens[n]}"},
                            files={"file": payload},
                        )
                        for n, payload in enumerate(payloads)
                    )
                )
                elapsed = time.monotonic() - started
                done = True
                await sampler
                after = rss_kib(server.pid)
            statuses = [answer.status_code for answer in answers]
            total = sum(len(data) for _, data in payloads)
            print(f"uploads: {uploads}, {total / MIB:.1f} MiB in all, statuses {sorted(set(statuses))}")
            print(f"wall time: {elapsed:.2f} s")
            print(
                f"server RSS before: {before / 1024:.1f} MiB, peak: {peak / 1024:.1f} MiB, after: {after / 1024:.1f} MiB"
            )
            print(f"peak growth: {(peak - before) / 1024:.1f} MiB")
        finally:
            server.terminate()
            server.wait(15)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uploads", type=int, default=10)
    asyncio.run(main(parser.parse_args().uploads))
