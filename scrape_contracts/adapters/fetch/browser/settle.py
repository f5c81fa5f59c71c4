"""A loaded page brought to the state the contract reads: the network quiet, the click steps done,
``wait_for`` matched (adapters/fetch/browser/render.py loads the page and reads its HTML after this).

Each wait is bounded by ``fetch.browser.timeout_s``; a wait that runs out is a ``FetchError`` saying which
setting to change, as every other failure of a render.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from scrape_contracts.adapters.fetch.page import FetchError

if TYPE_CHECKING:
    from scrape_contracts.contract.fetch import BrowserSettings, ClickStep

QUIET_S = 0.5  # "network idle": no request in flight for this long


class Inflight:
    """Requests of one page not yet finished, to wait for a quiet network (also after clicks, which
    Playwright's own "networkidle" load state does not cover)."""

    def __init__(self, page: Any) -> None:
        self.count = 0
        self.changed = asyncio.Event()
        page.on("request", lambda _r: self._add(1))
        page.on("requestfinished", lambda _r: self._add(-1))
        page.on("requestfailed", lambda _r: self._add(-1))

    def _add(self, delta: int) -> None:
        self.count = max(0, self.count + delta)
        self.changed.set()

    async def quiet(self, timeout_s: float) -> bool:
        """True once nothing was in flight for ``QUIET_S``; False when ``timeout_s`` passed first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.changed.clear()
            if self.count == 0:
                try:
                    await asyncio.wait_for(self.changed.wait(), min(QUIET_S, deadline - time.monotonic()))
                except asyncio.TimeoutError:
                    return True
            else:
                try:
                    await asyncio.wait_for(self.changed.wait(), max(0.0, deadline - time.monotonic()))
                except asyncio.TimeoutError:
                    return False
        return False


async def settle(page: Any, inflight: Inflight, settings: BrowserSettings, safe_url: str) -> None:
    """Network idle, click steps and ``wait_for``, in that order, each bounded by browser.timeout_s."""
    wait_s = settings.timeout_s
    if settings.network_idle and not await inflight.quiet(wait_s):
        raise FetchError(f"GET {safe_url} timed out: the network did not go quiet within {wait_s:g}s "
                         "(the page keeps requesting; set fetch.browser.network_idle: false and use "
                         "wait_for)",
                         kind="browser_wait", url=safe_url, transient=True)
    for number, step in enumerate(settings.clicks, 1):
        await _click(page, inflight, settings, step, number, safe_url)
    if settings.wait_for:
        from playwright.async_api import TimeoutError as PlaywrightTimeout

        try:
            await page.wait_for_selector(settings.wait_for, state="attached", timeout=wait_s * 1000)
        except PlaywrightTimeout:
            raise FetchError(
                f"GET {safe_url} timed out: wait_for {settings.wait_for!r} matched nothing within "
                f"{wait_s:g}s (check the selector against the rendered page, or raise "
                "fetch.browser.timeout_s)", kind="browser_wait", url=safe_url, transient=True) from None
    if settings.network_idle:
        await inflight.quiet(wait_s)


async def _click(page: Any, inflight: Inflight, settings: BrowserSettings, step: ClickStep, number: int,
                 safe_url: str) -> None:
    from playwright.async_api import Error as PlaywrightError

    wait_s = settings.timeout_s
    for clicked in range(step.times):
        target = page.locator(step.selector).first
        # after the first click, a button that went away means "nothing more to load"; an optional step
        # whose element is not on the loaded page is skipped at once rather than waited for
        if (clicked or step.optional) and not await target.count():
            return
        try:
            await target.click(timeout=wait_s * 1000)
        except PlaywrightError:
            if clicked or step.optional:
                return
            raise FetchError(
                f"GET {safe_url} failed: click step {number} found no clickable {step.selector!r} within "
                f"{wait_s:g}s (check the selector against the rendered page, or mark the step "
                "`optional: true` if the element is not always shown)",
                kind="browser_step", url=safe_url, transient=False) from None
        # what the click loads (the next items, the page behind a banner) before the next step
        await inflight.quiet(wait_s)
