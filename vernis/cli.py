"""The `vernis` command (SPEC §13).

vernis serve [--host H] [--port P] [--workers N] [--demo [--demo-public]] [--scripted-model]
vernis db upgrade
vernis seed-demo
vernis token --sub S --org O [--role R] [--name N] [--email E] [--ttl SECONDS]
vernis token EMAIL [--ttl SECONDS]            (a demo member)
vernis check-config
vernis webhooks list [--failed]                (the delivery log, newest first)
vernis webhooks retry ID                       (send a failed delivery again)

A configuration that cannot work (settings, the host configuration file, a toolkit) stops any
command with one message naming what to fix, and exit status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import uvicorn
from pydantic import ValidationError

from vernis.exceptions import ConfigError
from vernis.metrics import MULTIPROC_ENV
from vernis.settings import Settings, load_settings
from vernis.web.sse import VernisHttpProtocol
from vernis.ws.transport import VernisProtocol

if TYPE_CHECKING:
    from vernis.tools.catalog import Catalog

__all__ = ["main", "uvicorn_options"]

logger = logging.getLogger("vernis.cli")

# How long `serve --workers N`'s supervisor waits for a worker's answer before it kills it as hung.
WORKER_HEALTHCHECK_SECONDS = 30


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """uvicorn, configured the way Vernis must run: tight WebSocket limits (SPEC §2).

    uvicorn's own defaults allow 16 MiB frames and per-message deflate (a small frame can inflate a
    thousandfold); the sans-I/O websockets implementation is the fastest and leanest here, run with
    Vernis's keepalive (`vernis.ws.keepalive`: a ping every `ping_interval`, and a missed pong closes
    with 4408, where uvicorn's own closes with 1011). uvloop and httptools are declared
    dependencies, chosen here rather than left to whatever happens to be installed.
    """
    return {
        # uvloop's event loop and httptools' parser: the plain asyncio loop's polling is a large
        # share of the CPU per streamed delta, and uvloop's costs less.
        "loop": "uvloop",
        # httptools' parser, with a writer of server-sent events' chunks (`vernis.web.sse`).
        "http": VernisHttpProtocol,
        "ws": VernisProtocol,
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
    from vernis.app import build_catalog, create_app
    from vernis.logs import configure_logging

    overrides: dict[str, Any] = {"demo": True} if args.demo else {}
    scripted_socket = None
    if args.scripted_model:
        from vernis.model.scripted import SCRIPTED_CHAT_MODEL, SCRIPTED_TITLE_MODEL

        # The scripted model gets a loopback server of its own, so that the main server's shutdown
        # (which drains its own connections) does not cut answers off mid-stream.
        scripted_socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        scripted_socket.bind(("127.0.0.1", 0))
        overrides |= {
            "llm_base_url": f"http://127.0.0.1:{scripted_socket.getsockname()[1]}/v1",
            "llm_api_key": "scripted",
            "llm_model": SCRIPTED_CHAT_MODEL,
            "title_model": SCRIPTED_TITLE_MODEL,
        }
    settings = load_settings(**overrides)
    configure_logging(settings.log_level, settings.log_format)
    if args.workers > 1 and not settings.redis_url:
        raise ConfigError(
            f"--workers {args.workers}: several processes must share conversation events, answer leases "
            "and limits through Redis: set VERNIS_REDIS_URL (and a PostgreSQL VERNIS_DATABASE_URL)"
        )
    if settings.demo and not _loopback(args.host) and not args.demo_public:
        raise ConfigError(
            f"--host {args.host}: the demo lets anyone who reaches it act as any demo member; it binds "
            "to a loopback address only, unless you add --demo-public"
        )
    catalog = build_catalog(settings)
    if args.workers > 1:
        return _serve_workers(args, settings, catalog, scripted_socket)
    app = create_app(settings, catalog=catalog, scripted=scripted_socket is not None, freeze_gc=True)
    _migrate(settings, catalog)
    if settings.demo:
        logger.warning(
            "DEMO MODE: the demo login at /login signs a token for any demo member, for anyone who "
            "reaches this server. Never expose it; run `vernis serve` without --demo for a product."
        )
        _seed(settings, catalog)

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

    from vernis.model.scripted import ScriptedModel, default_scenarios

    scenarios = (
        [scenario for _, demo in catalog.demos for scenario in demo.scenarios()] if settings.demo else []
    )
    # Paced like a real model, so streaming can be seen.
    scripted = ScriptedModel(chunk_delay=0.03, scenarios=scenarios or default_scenarios())
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


def _serve_workers(
    args: argparse.Namespace, settings: Settings, catalog: Catalog, scripted_socket: socket.socket | None
) -> int:
    """N worker processes behind one port (uvicorn's supervisor), sharing state through Redis.

    This process migrates (and seeds the demo) once, then supervises; each worker builds its app
    from the environment (`vernis.app:app_from_environment`), so what the command line set is put
    there. The scripted model, if asked for, runs here, on a thread, shared by the workers.
    """
    from vernis.app import create_app

    create_app(settings, catalog=catalog)  # a configuration that cannot work fails here, once
    _migrate(settings, catalog)
    if settings.demo:
        logger.warning("DEMO MODE: the demo login signs a token for any demo member; never expose it.")
        _seed(settings, catalog)
    environment = {"VERNIS_DEMO": "1" if settings.demo else ""}
    if settings.jwt_secret:
        environment["VERNIS_JWT_SECRET"] = settings.jwt_secret
    if scripted_socket is not None:
        from vernis.model.scripted import ScriptedModel, default_scenarios

        environment |= {
            "VERNIS_LLM_BASE_URL": settings.llm_base_url or "",
            "VERNIS_LLM_API_KEY": settings.llm_api_key or "",
            "VERNIS_LLM_MODEL": settings.chat_model,
            "VERNIS_TITLE_MODEL": settings.title_model_name,
            "VERNIS_SCRIPTED_MODEL": "1",
        }
        scenarios = [s for _, demo in catalog.demos for s in demo.scenarios()] if settings.demo else []
        scripted = ScriptedModel(chunk_delay=0.03, scenarios=scenarios or default_scenarios())
        side = _SideServer(uvicorn.Config(scripted.app, log_config=None, log_level="warning", lifespan="off"))
        sockets = [scripted_socket]
        threading.Thread(
            target=lambda: asyncio.run(side.serve(sockets=sockets)), name="scripted model", daemon=True
        ).start()
    # /metrics shows every worker's values (vernis.metrics): a directory of this run, made empty.
    metrics_dir = tempfile.mkdtemp(prefix="vernis-metrics-")
    environment[MULTIPROC_ENV] = metrics_dir
    os.environ.update({name: value for name, value in environment.items() if value})
    signal.signal(signal.SIGTERM, _stopped_gracefully)
    try:
        uvicorn.run(
            "vernis.app:app_from_environment",
            factory=True,
            workers=args.workers,
            host=args.host,
            port=args.port,
            log_config=None,
            log_level=settings.log_level.lower(),
            # The supervisor kills a worker that does not answer its ping in time, and a worker
            # answers only once Python has imported what its start needs: on a loaded machine that
            # took over uvicorn's 5 s, and every new worker was killed in turn, for good.
            timeout_worker_healthcheck=WORKER_HEALTHCHECK_SECONDS,
            **uvicorn_options(settings),
        )
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)
    return 0


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _migrate(settings: Settings, catalog: Catalog) -> None:
    from vernis.store.migrate import upgrade

    asyncio.run(upgrade(settings.database_url, branches=catalog.migrations))


def _stopped_gracefully(signum: int, frame: object) -> None:
    """Runs after uvicorn's own SIGTERM handling has shut the server down."""


def _seed(settings: Settings, catalog: Catalog) -> None:
    from vernis.store.engine import create_engine

    async def run() -> None:
        engine = create_engine(settings.database_url)
        try:
            for name, demo in catalog.demos:
                print(f"{name}: {await demo.seed(engine)}", flush=True)
        finally:
            await engine.dispose()

    asyncio.run(run())


def _db_upgrade(args: argparse.Namespace) -> int:
    from vernis.app import build_catalog

    settings = load_settings()
    _migrate(settings, build_catalog(settings))
    print("database is at the latest revision")
    return 0


def _seed_demo(args: argparse.Namespace) -> int:
    from vernis.app import build_catalog

    settings = load_settings(demo=True)
    catalog = build_catalog(settings)
    _migrate(settings, catalog)
    _seed(settings, catalog)
    return 0


def _export_feedback(args: argparse.Namespace) -> int:
    """The feedback export (`vernis.conversation.feedback`) to standard output, one JSON object a
    line, as `GET /api/admin/feedback` answers it."""
    import orjson

    from vernis.conversation.feedback import feedback_records
    from vernis.store.engine import create_engine
    from vernis.web.ops import parse_since

    try:
        since = parse_since(args.since)
    except ValueError:
        print(f"vernis: --since {args.since!r} is not an ISO 8601 date or time", file=sys.stderr)
        return 2
    settings = load_settings()

    async def run() -> int:
        engine = create_engine(settings.database_url)
        count = 0
        try:
            async for record in feedback_records(engine, since=since, org=args.org):
                sys.stdout.buffer.write(orjson.dumps(record) + b"\n")
                count += 1
        finally:
            await engine.dispose()
        sys.stdout.flush()
        print(f"vernis: {count} rated answers exported", file=sys.stderr)
        return 0

    return asyncio.run(run())


def _token(args: argparse.Namespace) -> int:
    from vernis.identity import issue_token

    settings = load_settings(demo=True) if args.email else load_settings()
    if not settings.jwt_secret:
        raise ConfigError("vernis token signs with VERNIS_JWT_SECRET (HS256), which is not set")
    if args.email:
        if args.sub or args.org:
            raise ConfigError("vernis token: give either a demo member's EMAIL or --sub and --org, not both")
        claims = _demo_claims(settings, args.email)
        if claims is None:
            print(
                f"vernis: no demo member with e-mail {args.email!r} (run `vernis seed-demo`)", file=sys.stderr
            )
            return 1
    elif args.sub and args.org:
        claims = {
            "sub": args.sub,
            "org": args.org,
            "role": args.role,
            "name": args.name,
            "email": args.email_claim,
        }
    else:
        raise ConfigError("vernis token: give --sub and --org (the host's user and organization ids)")
    print(
        issue_token(
            settings.jwt_secret,
            ttl=args.ttl,
            issuer=settings.jwt_issuer,
            audience=settings.jwt_audience,
            org_claim=settings.jwt_org_claim,
            **claims,
        )
    )
    return 0


def _demo_claims(settings: Settings, email: str) -> dict[str, Any] | None:
    import sqlalchemy as sa

    from vernis.store.engine import create_engine
    from vernis.store.models import Member, Organization, table_of

    member, organization = table_of(Member), table_of(Organization)
    query = (
        sa.select(
            member.c.external_id,
            organization.c.external_id.label("org"),
            member.c.role,
            member.c.name,
            member.c.email,
        )
        .join(organization, organization.c.id == member.c.organization_id)
        .where(sa.func.lower(member.c.email) == email.strip().lower(), member.c.removed_at.is_(None))
    )

    async def find() -> Any:
        engine = create_engine(settings.database_url)
        try:
            async with engine.connect() as connection:
                return (await connection.execute(query)).first()
        finally:
            await engine.dispose()

    row = asyncio.run(find())
    if row is None:
        return None
    return {"sub": row.external_id, "org": row.org, "role": row.role, "name": row.name, "email": row.email}


def _webhooks(args: argparse.Namespace) -> int:
    """The webhooks' delivery log (`vernis.webhooks.log`): list it, or send one delivery again."""
    from uuid import UUID

    from vernis.store.engine import create_engine
    from vernis.webhooks.log import list_deliveries, retry_delivery

    settings = load_settings()

    async def run() -> int:
        engine = create_engine(settings.database_url)
        try:
            if args.webhooks_command == "list":
                records = await list_deliveries(engine, failed=args.failed)
                for record in records:
                    print(record.line())
                if not records:
                    print("no failed deliveries" if args.failed else "no deliveries")
                return 0
            try:
                delivery_id = UUID(args.id)
            except ValueError:
                print(f"vernis: {args.id!r} is not a delivery id", file=sys.stderr)
                return 2
            if not await retry_delivery(engine, delivery_id):
                print(f"vernis: no delivery {delivery_id} waiting or failed", file=sys.stderr)
                return 1
            print(f"delivery {delivery_id} is due again; a running Vernis sends it")
            return 0
        finally:
            await engine.dispose()

    return asyncio.run(run())


def _check_config(args: argparse.Namespace) -> int:
    from vernis.app import build_catalog, verifier_from
    from vernis.attachments.stores import is_shared_store, store_location
    from vernis.config import load_config
    from vernis.tools.mcp import McpToolkit

    settings = load_settings()
    config = load_config(settings.config)
    catalog = build_catalog(settings, config)
    verifier_from(settings)
    attachments = store_location(settings)
    if settings.redis_url and not is_shared_store(settings):
        # Several instances (SPEC §10): an upload one of them took must be readable by all of them.
        raise ConfigError(
            f"VERNIS_ATTACHMENT_STORE: several instances (VERNIS_REDIS_URL is set) need storage they all "
            f"share: set it to s3://bucket/prefix (any S3-compatible store); {attachments} is a local "
            "directory, which other machines do not see"
        )
    servers = [toolkit for toolkit in catalog.toolkits if isinstance(toolkit, McpToolkit)]
    wait = 5.0

    async def probe_all() -> list[str | None]:
        # Each server once, all at once, briefly: their tools join the catalog; a down one says why.
        return await asyncio.gather(*(server.probe(wait) for server in servers))

    down = asyncio.run(probe_all()) if servers else []
    print(f"configuration: {config.path or 'none (no vernis.toml): the defaults'}")
    print(f"assistant: {catalog.assistant_name}")
    names = ", ".join(f"{t.name} ({len(t.tools)} tools)" for t in catalog.toolkits) or "none"
    print(f"toolkits: {names}")
    print(f"attachments: {attachments}")
    for entry in config.webhooks:
        print(f"webhook: {entry.url} ({', '.join(entry.events)})")
    if servers:
        print(f"MCP servers (each given at most {wait:g} s to answer):")
    for server, reason in zip(servers, down, strict=True):
        permission = server.entry.tool_permission
        if reason is None:
            print(f"  {server.name}: up, {len(server.tools)} tools (permission {permission})")
        else:
            print(f"  {server.name}: DOWN ({reason}); Vernis would start without its tools")
    print("tools by role (for tokens without a `permissions` claim):")
    for role, tools in catalog.tools_by_role().items():
        print(f"  {role}: {', '.join(tools) if tools else '(none)'}")
    print("configuration is valid")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vernis", description="Vernis: a real-time AI assistant server.")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="apply migrations, then serve")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=1, help="server processes (above 1 needs Redis)")
    serve.add_argument(
        "--demo",
        action="store_true",
        default=None,
        help="demo mode: the CRM toolkit, its demo data, demo pages and login (also VERNIS_DEMO=1)",
    )
    serve.add_argument(
        "--demo-public", action="store_true", help="let the demo bind to an address beyond loopback"
    )
    serve.add_argument(
        "--scripted-model", action="store_true", help="answer with the built-in scripted model (offline demo)"
    )
    serve.set_defaults(handler=_serve)

    db = commands.add_parser("db", help="database schema")
    db_commands = db.add_subparsers(dest="db_command", required=True)
    db_commands.add_parser("upgrade", help="apply every migration").set_defaults(handler=_db_upgrade)

    commands.add_parser("seed-demo", help="load the demo organizations (idempotent)").set_defaults(
        handler=_seed_demo
    )

    token = commands.add_parser("token", help="print a token signed with VERNIS_JWT_SECRET")
    token.add_argument("email", nargs="?", help="a demo member's e-mail (instead of --sub and --org)")
    token.add_argument("--sub", help="the host's user id")
    token.add_argument("--org", help="the host's organization id")
    token.add_argument("--role", help="the user's role (its permissions come from the role table)")
    token.add_argument("--name", help="the user's name")
    token.add_argument("--email", dest="email_claim", help="the user's e-mail")
    token.add_argument("--ttl", type=int, default=12 * 3600, help="seconds until it expires (default 12 h)")
    token.set_defaults(handler=_token)

    commands.add_parser(
        "check-config", help="validate the configuration and toolkits; list the tools each role gets"
    ).set_defaults(handler=_check_config)

    export = commands.add_parser(
        "export-feedback", help="print the rated answers as JSON lines (e.g. > feedback.jsonl)"
    )
    export.add_argument("--since", help="ISO 8601 date or time of the oldest rating (default: all)")
    export.add_argument("--org", help="only this organization (the host's id)")
    export.set_defaults(handler=_export_feedback)

    webhooks = commands.add_parser("webhooks", help="the webhooks' delivery log")
    webhooks_commands = webhooks.add_subparsers(dest="webhooks_command", required=True)
    listing = webhooks_commands.add_parser("list", help="the newest deliveries, newest first")
    listing.add_argument("--failed", action="store_true", help="only those that failed for good")
    retry = webhooks_commands.add_parser("retry", help="send a failed delivery again, now")
    retry.add_argument("id", help="the delivery's id (as `list` shows it)")
    for command in (listing, retry):
        command.set_defaults(handler=_webhooks)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.handler(args)
    except ConfigError as exc:
        print(f"vernis: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:
        problems = "; ".join(
            f"VERNIS_{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}"
            for e in exc.errors(include_url=False, include_input=False)
        )
        print(f"vernis: invalid settings: {problems}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
