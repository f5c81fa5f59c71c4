"""``scrape-contracts tokens create|list|revoke``, ``serve`` (the REST API) and ``mcp`` (the MCP server)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from scrape_contracts.cli import common


def register(sub: Any) -> None:
    tokens = sub.add_parser("tokens", help="API tokens for `serve` and `mcp`: create, list, revoke"
                            ).add_subparsers(dest="tokens_command", required=True)
    p = tokens.add_parser("create", help="a new token; prints its id, then the token alone on the last line "
                                         "(shown once: only its hash is kept)")
    p.add_argument("--owner", required=True, help="team:NAME or an e-mail address, as in contracts' owners:")
    p.add_argument("--scope", choices=["read", "write"], required=True)
    p.add_argument("--label", default="", help="what the token is for")
    p.set_defaults(func=cmd_tokens_create)
    p = tokens.add_parser("list", help="tokens: id, owner, scope, created, revoked (never the tokens)")
    p.set_defaults(func=cmd_tokens_list)
    p = tokens.add_parser("revoke", help="revoke a token by its id or by the token itself")
    p.add_argument("token", help="the id printed by `tokens create` / `tokens list`, or the token")
    p.set_defaults(func=cmd_tokens_revoke)

    p = sub.add_parser("serve", help="the REST API (with SSE and health endpoints) on DAGSTER_HOME's instance")
    p.add_argument("--host", default="127.0.0.1",
                   help="the address to listen on (default 127.0.0.1; for other machines, put a reverse proxy "
                        "that terminates TLS in front: docs/api.md)")
    p.add_argument("--port", type=int, default=8000)
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("mcp", help="the MCP server (tools for agents) over stdio or streamable HTTP",
                       allow_abbrev=False)  # --token must not pass as an abbreviation of --token-file
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8001)
    p.add_argument("--token-file", type=Path, default=None, metavar="PATH",
                   help="stdio: a file holding the API token the tools act with (default: $SCRAPE_CONTRACTS_TOKEN); "
                        "never on the command line, which other users of the machine can read. Over http each "
                        "caller sends its own (Authorization: Bearer)")
    p.add_argument("--token", action=_NoTokenArgument, help=argparse.SUPPRESS)
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME:PORT",
                   help="http: a Host header clients may send (repeat it; loopback names are allowed on a loopback "
                        "address; required on any other); others get 421")
    p.add_argument("--allowed-origin", action="append", default=[], metavar="URL",
                   help="http: an Origin a browser client may send (repeat it); others get 403")
    p.set_defaults(func=cmd_mcp)


class _NoTokenArgument(argparse.Action):
    """``--token`` was an option once: refused with what to do instead, without repeating the token."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        parser.error("--token is not accepted (other users of the machine can read a process's arguments): put "
                     "the token in a file readable only by you and pass --token-file PATH, or set "
                     "SCRAPE_CONTRACTS_TOKEN")


def _tokens():  # -> TokenStore
    from scrape_contracts.api.tokens import TokenStore

    return TokenStore(common.store().engine)


def cmd_tokens_create(args: argparse.Namespace) -> int:
    from scrape_contracts.api.tokens import TokenError

    try:
        info, token = _tokens().create(args.owner, args.scope, args.label)
    except TokenError as exc:
        raise common.CliError(str(exc), 2) from None
    print(f"created token {info.id} for {info.owner} ({info.scope.value}); it is shown once, below:")
    print(token)
    return 0


def cmd_tokens_list(args: argparse.Namespace) -> int:
    found = _tokens().list()
    if not found:
        print("no tokens (create one with `scrape-contracts tokens create --owner team:NAME --scope read`)")
    for t in found:
        state = f"revoked {t.revoked_at:%Y-%m-%d %H:%M}" if t.revoked_at else "active"
        print(f"{t.id}  {t.owner}  {t.scope.value:<5}  created {t.created_at:%Y-%m-%d %H:%M}  {state}"
              + (f"  {t.label}" if t.label else ""))
    return 0


def cmd_tokens_revoke(args: argparse.Namespace) -> int:
    from scrape_contracts.api.tokens import TokenError

    try:
        info = _tokens().revoke(args.token)
    except TokenError as exc:
        raise common.CliError(str(exc), 2) from None
    print(f"revoked token {info.id} of {info.owner}: refused from its next request on")
    return 0


def _contracts_env(args: argparse.Namespace) -> None:
    if args.contracts_dir:
        # launches load the code location, which reads the contracts from here
        os.environ["SCRAPE_CONTRACTS_DIR"] = str(Path(args.contracts_dir).resolve())


def _front_door(args: argparse.Namespace):  # -> FrontDoor
    from scrape_contracts.api import FrontDoor

    return FrontDoor(contracts_dir=args.contracts_dir, instance=common.instance())


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from scrape_contracts.api.rest import create_app

    _contracts_env(args)
    # the instance and the store now: a wrong DAGSTER_HOME fails here in one line, not on each request
    app = create_app(front_door=_front_door(args))
    print(f"scrape-contracts API on http://{args.host}:{args.port} (OpenAPI: /openapi.json, docs: /docs)",
          flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    from scrape_contracts.api.mcp import build_server, run, transport_security
    from scrape_contracts.api.serving import bind_warning

    _contracts_env(args)
    if args.transport == "http":
        try:
            security = transport_security(args.host, args.port, args.allowed_host, args.allowed_origin)
        except ValueError as exc:
            raise common.CliError(str(exc), 2) from None
        warning = bind_warning(args.host, "mcp --transport http")
        if warning:
            print(warning, file=sys.stderr, flush=True)
        # every caller sends its own token (Authorization: Bearer); the server holds none
        url = f"http://{args.host}:{args.port}"
        run(build_server(None, front_door=_front_door(args), http_url=url), args.transport, args.host, args.port,
            security)
        return 0
    token = stdio_token(args.token_file)
    run(build_server(token, front_door=_front_door(args)), args.transport, args.host, args.port)
    return 0


def stdio_token(path: Path | None) -> str:
    """The stdio server's token: from ``--token-file``, else $SCRAPE_CONTRACTS_TOKEN (never an argument:
    /proc/PID/cmdline is readable by every user of the machine)."""
    if path is not None:
        try:
            token = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeError) as exc:
            raise common.CliError(f"--token-file {path}: cannot read it ({exc.strerror or exc})", 2) from None
        if not token or len(token.split()) != 1:
            raise common.CliError(f"--token-file {path}: must hold one API token (from `scrape-contracts tokens "
                                  "create`) and nothing else", 2)
        return token
    token = os.environ.get("SCRAPE_CONTRACTS_TOKEN", "").strip()
    if not token:
        raise common.CliError("the MCP server over stdio needs an API token: --token-file PATH, or set "
                              "SCRAPE_CONTRACTS_TOKEN; create one with `scrape-contracts tokens create`", 2)
    return token
