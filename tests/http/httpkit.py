"""Helpers of the HTTP API tests: two tenants' tokens over one engine, a recording job queue, an httpx client."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from memory_core.engines.reference import ReferenceEngine
from memory_core.http import TokenTable, create_app
from memory_core.lifecycle.jobs import BuildBeliefs, IngestBrain

T = TypeVar("T")

TOKEN_A = "tenant-a-token-0123456789"
TOKEN_B = "tenant-b-token-9876543210"
TOKEN_A_BOT = "tenant-a-bot-only-token-42"
TOKENS = [
    {"token": TOKEN_A, "root": "team:a", "name": "a"},
    {"token": TOKEN_B, "root": "team:b", "name": "b"},
    {"token": TOKEN_A_BOT, "root": "team:a", "agents": ["bot"], "name": "a-bot"},
]


@dataclass
class Sent:
    id: str
    state: str


@dataclass
class RecordingQueue:
    """A JobQueue double: keeps what was sent, in order."""

    jobs: list[BuildBeliefs | IngestBrain] = field(default_factory=list)
    closed: bool = False

    def send(self, job: BuildBeliefs | IngestBrain) -> Sent:
        self.jobs.append(job)
        return Sent(f"job-{len(self.jobs)}", "published")

    def close(self) -> None:
        self.closed = True


@dataclass
class Api:
    engine: ReferenceEngine
    queue: RecordingQueue
    app: Any
    base_url: str = "http://test"

    def call(self, method: str, path: str, token: str | None = TOKEN_A, **kwargs: Any) -> httpx.Response:
        headers = dict(kwargs.pop("headers", {}))
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"

        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url=self.base_url) as client:
                return await client.request(method, path, headers=headers, **kwargs)

        return run(go)

    def post(self, path: str, body: Any = None, token: str | None = TOKEN_A, **kwargs: Any) -> httpx.Response:
        if body is not None:
            kwargs["json"] = body
        return self.call("POST", path, token, **kwargs)


def run(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(make())


def make_api() -> Api:
    engine = ReferenceEngine()
    queue = RecordingQueue()
    app = create_app(engine, TokenTable.from_json(TOKENS), max_body=4096, queue=lambda: queue)
    return Api(engine, queue, app)
