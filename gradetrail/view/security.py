"""The viewer's HTTP guards: security headers on every response, and the Host check
that keeps pages on other sites from reading the viewer through DNS rebinding."""

from __future__ import annotations

import ipaddress
from typing import Any

from starlette.datastructures import Headers
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["CSP", "SECURITY_HEADERS", "HostCheck", "SecurityHeaders", "default_hosts"]

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-resource-policy", b"same-origin"),
]


def default_hosts(host: str) -> list[str]:
    """Host header values accepted when serving on ``host``: the loopback names, and
    ``host`` itself."""
    hosts = ["127.0.0.1", "localhost", "[::1]", "::1"]
    if host not in hosts and host not in ("0.0.0.0", "::"):
        hosts.append(host if ":" not in host else f"[{host}]")
    return hosts


class HostCheck:
    """The Host header must name the address served (:class:`TrustedHostMiddleware` over
    ``allowed_hosts``), or be the IP address the connection arrived on: a wildcard bind
    (``--host 0.0.0.0``) reached through any of this machine's addresses. An IP literal
    cannot come from DNS rebinding, which needs a name the attacker controls."""

    def __init__(self, app: ASGIApp, allowed_hosts: list[str]) -> None:
        self.app = app
        self.trusted = TrustedHostMiddleware(app, allowed_hosts=allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and _host_is_local_address(scope):
            await self.app(scope, receive, send)
        else:
            await self.trusted(scope, receive, send)


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped  # a dual-stack socket's view of an IPv4 client
    return address


def _host_is_local_address(scope: Scope) -> bool:
    """Whether the Host header is the IP literal of the connection's local address."""
    host = Headers(scope=scope).get("host", "")
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 or "]:" in host else host
    server = scope.get("server") or (None,)
    local = _ip(str(server[0])) if server[0] else None
    return local is not None and _ip(name) == local


class SecurityHeaders:
    """Adds :data:`SECURITY_HEADERS` to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = list(message["headers"]) + SECURITY_HEADERS
            await send(message)

        await self.app(scope, receive, with_headers)
