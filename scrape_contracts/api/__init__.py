"""The front door for services and agents: tokens, the operations the REST API and MCP server share, audit.

``FrontDoor`` (ops.py) is the one place both doors call; ``rest.py`` and ``mcp.py`` only translate.
"""

from scrape_contracts.api.ops import FrontDoor, Refusal, Refused
from scrape_contracts.api.tokens import Principal, TokenError, TokenStore

__all__ = ["FrontDoor", "Principal", "Refusal", "Refused", "TokenError", "TokenStore"]
