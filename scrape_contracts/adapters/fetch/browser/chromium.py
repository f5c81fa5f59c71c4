"""Which Chromium the browser adapter drives, and how it is started.

Playwright's own browser downloads are not used: the system's Chromium (Debian's ``chromium`` package,
or any Chrome/Chromium binary) is given by path or found on PATH.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping

ENV_VAR = "SCRAPE_CONTRACTS_CHROMIUM"
ON_PATH = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
INSTALL_HINT = (f"install it with `apt-get install chromium` (Debian/Ubuntu), or set {ENV_VAR} (or "
                "fetch.browser.executable) to the path of a Chromium or Chrome binary")
# --disable-quic: HTTP/3 is UDP and would not go through the guard proxy; WebRTC UDP is refused likewise.
# --no-proxy-server: the environment's proxy settings must not choose where requests go (each page gets the
# guard proxy of its own), like trust_env=False in the http adapter.
LAUNCH_ARGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--dns-prefetch-disable", "--no-proxy-server",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
)


class BrowserUnavailable(Exception):
    """No Chromium to drive (or Playwright missing); the message says how to install it, in one line."""


def find_chromium(configured: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The Chromium binary: ``fetch.browser.executable``, else ``$SCRAPE_CONTRACTS_CHROMIUM``, else the first
    of ``ON_PATH`` found on PATH. Raises ``BrowserUnavailable`` naming what was tried."""
    env = os.environ if environ is None else environ
    for source, path in (("fetch.browser.executable", configured), (ENV_VAR, env.get(ENV_VAR))):
        if path:
            found = shutil.which(path)
            if found is None:
                raise BrowserUnavailable(f"Chromium not found: {source} is {path!r}, which is not an "
                                         f"executable file; {INSTALL_HINT}")
            return found
    for name in ON_PATH:
        found = shutil.which(name, path=env.get("PATH"))
        if found:
            return found
    raise BrowserUnavailable(f"Chromium not found: none of {', '.join(ON_PATH)} is on PATH; {INSTALL_HINT}")


def launch_problem(error: Exception, executable: str) -> str:
    """One line for a browser that would not start (the first line of Playwright's long message)."""
    first = next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)
    return f"Chromium at {executable} did not start ({first[:300]}); {INSTALL_HINT}"
