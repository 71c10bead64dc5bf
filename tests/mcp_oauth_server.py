"""An OAuth-protected MCP server for tickloop's tests, on the `mcp` package's server-side
auth: the MCP server is also its own authorization server (metadata, dynamic client
registration, /authorize, /token with PKCE and refresh).

`python tests/mcp_oauth_server.py PORT EXPIRES` serves streamable HTTP on
127.0.0.1:PORT/mcp; access tokens last EXPIRES seconds and are refused after. /authorize
approves at once, redirecting to the client's redirect URI with a code (the test plays
the browser by following it). The `oauth_counts` tool says how many registrations,
code exchanges and refreshes it served; no tool ever returns a token.
"""

from __future__ import annotations

import secrets
import sys
import time
from typing import Any

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
EXPIRES = int(sys.argv[2]) if len(sys.argv) > 2 else 3600
BASE = f"http://127.0.0.1:{PORT}"

COUNTS = {"registrations": 0, "codes": 0, "refreshes": 0, "refused": 0}


class Provider:
    """Everything in memory; a code, access token or refresh token is used once."""

    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        COUNTS["registrations"] += 1
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or ["tools"],
            expires_at=time.time() + 300,
            client_id=client.client_id or "",
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        COUNTS["codes"] += 1
        self.codes.pop(authorization_code.code, None)
        return self._issue(client, authorization_code.scopes, authorization_code.resource)

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        COUNTS["refreshes"] += 1
        self.refresh.pop(refresh_token.token, None)
        return self._issue(client, scopes or refresh_token.scopes, refresh_token.resource)

    async def load_access_token(self, token: str) -> AccessToken | None:
        access = self.access.get(token)
        if access is None or (access.expires_at is not None and access.expires_at < time.time()):
            COUNTS["refused"] += 1
            return None
        return access

    async def revoke_token(self, token: Any) -> None:
        self.access.pop(getattr(token, "token", ""), None)

    def _issue(
        self, client: OAuthClientInformationFull, scopes: list[str], resource: Any
    ) -> OAuthToken:
        access = f"access-{secrets.token_urlsafe(16)}"
        refresh = f"refresh-{secrets.token_urlsafe(16)}"
        client_id = client.client_id or ""
        self.access[access] = AccessToken(
            token=access,
            client_id=client_id,
            scopes=scopes,
            expires_at=int(time.time()) + EXPIRES,
            resource=resource,
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource
        )
        return OAuthToken(
            access_token=access,
            token_type="Bearer",
            expires_in=EXPIRES,
            scope=" ".join(scopes),
            refresh_token=refresh,
        )


server = MCPServer(
    "oauth-test",
    auth_server_provider=Provider(),
    auth=AuthSettings(
        issuer_url=BASE,  # type: ignore[arg-type]
        resource_server_url=f"{BASE}/mcp",  # type: ignore[arg-type]
        client_registration_options=ClientRegistrationOptions(
            enabled=True, valid_scopes=["tools"], default_scopes=["tools"]
        ),
        required_scopes=["tools"],
        validate_token_resource=True,
    ),
)


@server.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@server.tool()
def oauth_counts() -> dict[str, int]:
    """How many registrations, code exchanges and refreshes this server served."""
    return dict(COUNTS)


if __name__ == "__main__":
    server.run("streamable-http", host="127.0.0.1", port=PORT)
