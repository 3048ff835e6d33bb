"""The dashboard served for real: uvicorn on 127.0.0.1 and a free port, in the
test's own event loop (the queue's pool belongs to it), and Debian's chromium
driven by Playwright (never a downloaded browser)."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from starlette.types import ASGIApp

from venturi import Queue
from venturi.store.postgres import PostgresStore
from venturi.web.server import Server, bind, port_of

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
TOKEN = "test-token-0123456789"


@dataclass
class Served:
    url: str  # no trailing slash
    server: Server

    def client(self, **kwargs: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=10, **kwargs)


@asynccontextmanager
async def serve(app: ASGIApp, *, lifespan: str = "on") -> AsyncIterator[Served]:
    sock = bind("127.0.0.1:0")
    server = Server(app, timeout_graceful_shutdown=2, lifespan=lifespan)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        yield Served(f"http://127.0.0.1:{port_of(sock)}", server)
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)
        state = getattr(app, "state", None)
        dashboard = getattr(state, "dashboard", None) if state is not None else None
        if dashboard is not None:
            await dashboard.aclose()
        sock.close()


@pytest.fixture
def web_queue(pg_store_dbclock: PostgresStore) -> Queue:
    """A queue on database time: visibility and heartbeats as a worker sees them."""
    return Queue(pg_store_dbclock)


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    if not shutil.which(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing: .ci/run installs Debian's chromium")
        pytest.skip("no chromium: apt-get install -y chromium")
    from playwright.async_api import async_playwright, expect

    # expect() waits 5 s unless told otherwise, whatever the page's own timeout: a
    # worker booting or a live update on a busy 2-core machine can take longer.
    expect.set_options(timeout=15_000)
    async with async_playwright() as p:
        b = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            await b.close()


@dataclass
class Watched:
    """A page plus what it reported: console errors, failed requests, dialogs."""

    page: Any
    errors: list[str]
    dialogs: list[str]


@pytest.fixture
def open_page(browser: Any) -> Callable[..., Awaitable[Watched]]:
    async def open_(url: str, *, width: int = 1280, height: int = 900) -> Watched:
        context = await browser.new_context(viewport={"width": width, "height": height})
        page = await context.new_page()
        errors: list[str] = []
        dialogs: list[str] = []
        # Console errors, and what they leave out: which subresource failed.
        page.on("console", lambda m: errors.append(m.text)
                if m.type == "error" and not m.text.startswith("Failed to load resource")
                else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("response", lambda r: errors.append(f"{r.status} {r.url}")
                if r.status >= 400 and r.request.resource_type != "document" else None)

        async def on_dialog(d: Any) -> None:
            dialogs.append(d.message)
            await d.dismiss()

        page.on("dialog", on_dialog)
        page.set_default_timeout(15_000)  # actions; expect()'s is set with the browser
        await page.goto(url)
        return Watched(page, errors, dialogs)
    return open_


async def sign_in(page: Any, base: str, token: str = TOKEN, name: str = "alice") -> None:
    await page.goto(f"{base}/login")
    await page.fill("input[name=token]", token)
    await page.fill("input[name=name]", name)
    await page.click("button[type=submit]")
    await page.wait_for_url(f"{base}/")


async def signed_in(open_page: Callable[..., Awaitable[Watched]], served: Served) -> Watched:
    """A page on the dashboard's front page, signed in with the test token."""
    watched = await open_page(served.url + "/")
    await sign_in(watched.page, served.url)
    return watched


async def confirm(page: Any, title: str, result: str, *, partial: bool = False) -> None:
    """Answer the action dialog titled ``title`` and wait for its ``result`` message
    (the whole text, or ``partial``: text it contains)."""
    from playwright.async_api import expect

    await expect(page.locator("#confirm-title")).to_have_text(title)
    await page.click("#confirm")
    message = expect(page.locator("#result-message"))
    await (message.to_contain_text(result) if partial else message.to_have_text(result))
