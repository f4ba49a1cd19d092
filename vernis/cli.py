"""The `vernis` command (SPEC §13).

vernis serve [--host H] [--port P] [--scripted-model] [--seed-demo]
vernis db upgrade
vernis seed-demo
vernis token EMAIL [--ttl SECONDS]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import socket
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import uvicorn

from vernis.settings import Settings, load_settings

__all__ = ["main", "uvicorn_options"]


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """uvicorn, configured the way Vernis must run: tight WebSocket limits (SPEC §2).

    uvicorn's own defaults allow 16 MiB frames and per-message deflate (a small frame can inflate a
    thousandfold); the sans-I/O websockets implementation is the fastest and leanest here and sends
    keepalive pings itself (a missed pong closes with 1011).
    """
    return {
        "ws": "websockets-sansio",
        "ws_max_size": settings.max_frame_bytes,
        "ws_per_message_deflate": False,
        "ws_ping_interval": settings.ping_interval,
        "ws_ping_timeout": settings.ping_timeout,
        "timeout_graceful_shutdown": int(settings.shutdown_grace) + 1,
        "lifespan": "on",
        "server_header": False,
    }


class _SideServer(uvicorn.Server):
    """A server that runs beside the main one and leaves the signals to it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _serve(args: argparse.Namespace) -> int:
    from vernis.app import create_app
    from vernis.db.migrate import upgrade
    from vernis.logs import configure_logging

    overrides: dict[str, Any] = {}
    scripted_socket = None
    if args.scripted_model:
        from vernis.scripted import SCRIPTED_CHAT_MODEL, SCRIPTED_TITLE_MODEL

        # The scripted model gets a loopback server of its own, so that the main server's shutdown
        # (which drains its own connections) does not cut answers off mid-stream.
        scripted_socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        scripted_socket.bind(("127.0.0.1", 0))
        overrides = {
            "llm_base_url": f"http://127.0.0.1:{scripted_socket.getsockname()[1]}/v1",
            "llm_api_key": "scripted",
            "llm_model": SCRIPTED_CHAT_MODEL,
            "title_model": SCRIPTED_TITLE_MODEL,
        }
    settings = load_settings(**overrides)
    configure_logging(settings.log_level, settings.log_format)
    asyncio.run(upgrade(settings.database_url))
    if args.seed_demo:
        _seed(settings)

    app = create_app(settings, scripted=scripted_socket is not None)
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_config=None,
        log_level=settings.log_level.lower(),
        **uvicorn_options(settings),
    )
    server = uvicorn.Server(config)
    # Once it has shut down gracefully, uvicorn raises the signal that stopped it again, for the
    # handler in place before it started: by default SIGTERM would then kill the process (exit
    # -15) after a clean shutdown. A graceful stop exits 0.
    signal.signal(signal.SIGTERM, _stopped_gracefully)
    if scripted_socket is None:
        server.run()
        return 0

    from vernis.scripted import ScriptedModel
    from vernis.scripted.demo import demo_scenarios

    # Paced like a real model, so streaming can be seen.
    scripted = ScriptedModel(chunk_delay=0.03, scenarios=demo_scenarios())
    side = _SideServer(uvicorn.Config(scripted.app, log_config=None, log_level="warning", lifespan="off"))

    async def both() -> None:
        side_task = asyncio.create_task(side.serve(sockets=[scripted_socket]))
        try:
            await server.serve()
        finally:
            side.should_exit = True
            await side_task

    asyncio.run(both())
    return 0


def _stopped_gracefully(signum: int, frame: object) -> None:
    """Runs after uvicorn's own SIGTERM handling has shut the server down."""


def _seed(settings: Settings) -> None:
    from vernis.db.engine import create_engine
    from vernis.db.seed import seed_demo

    async def run() -> None:
        engine = create_engine(settings.database_url)
        try:
            result = await seed_demo(engine)
        finally:
            await engine.dispose()
        print(f"demo data ready: {result}")

    asyncio.run(run())


def _db_upgrade(args: argparse.Namespace) -> int:
    from vernis.db.migrate import upgrade

    settings = load_settings()
    asyncio.run(upgrade(settings.database_url))
    print("database is at the latest revision")
    return 0


def _seed_demo(args: argparse.Namespace) -> int:
    from vernis.db.migrate import upgrade

    settings = load_settings()
    asyncio.run(upgrade(settings.database_url))
    _seed(settings)
    return 0


def _token(args: argparse.Namespace) -> int:
    from vernis.auth import issue_token
    from vernis.db.engine import create_engine
    from vernis.services.persistence import ConversationStore

    settings = load_settings()

    async def find() -> Any:
        engine = create_engine(settings.database_url)
        try:
            return await ConversationStore(engine).get_member_by_email(args.email)
        finally:
            await engine.dispose()

    member = asyncio.run(find())
    if member is None or member.removed:
        print(f"vernis: no member with e-mail {args.email!r}", file=sys.stderr)
        return 1
    assert settings.jwt_secret is not None
    print(
        issue_token(
            member.id,
            member.organization_id,
            settings.jwt_secret,
            ttl=args.ttl,
            algorithm=settings.jwt_algorithm,
        )
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vernis", description="Vernis: a real-time AI assistant server.")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="apply migrations, then serve")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument(
        "--scripted-model", action="store_true", help="answer with the built-in scripted model (offline demo)"
    )
    serve.add_argument("--seed-demo", action="store_true", help="load the demo data first (idempotent)")
    serve.set_defaults(handler=_serve)

    db = commands.add_parser("db", help="database schema")
    db_commands = db.add_subparsers(dest="db_command", required=True)
    db_commands.add_parser("upgrade", help="apply every migration").set_defaults(handler=_db_upgrade)

    commands.add_parser("seed-demo", help="load the demo organizations (idempotent)").set_defaults(
        handler=_seed_demo
    )

    token = commands.add_parser("token", help="print a token for a member")
    token.add_argument("email")
    token.add_argument("--ttl", type=int, default=12 * 3600, help="seconds until it expires (default 12 h)")
    token.set_defaults(handler=_token)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
