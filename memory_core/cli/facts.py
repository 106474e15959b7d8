"""``memory-core facts list|set|forget``: the facts at a layout's learnings node (seed 004 "Facts"; issue 20).

With ``--agent ID`` each works on the facts at that agent's node instead (``root/agent:<id>``, the id mapped as
``MemoryLayout.conversations`` maps it): where the model tools of an agent-scoped host (``memory-core mcp --agent``,
``AgentMemory.tools()``) store what they learn. ``set --agent`` also records the id as the fact's ``agent_id``.

``set`` checks its input before the engine is opened: a text over 2,000 characters, a blank or over-128-character
key, or an importance that is not a number in ``[0, 1]`` exits 2 naming the field, and nothing is stored.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.markup import escape

from memory_core.cli import app
from memory_core.cli._common import (
    EngineOption,
    RootOption,
    SignedArguments,
    check_agent_id,
    console,
    echo_json,
    engine_session,
    fail,
    layout_for,
    plural,
    shown,
)
from memory_core.cli.log import not_an_id
from memory_core.errors import InvalidRequest
from memory_core.facts.model import check_importance, check_key, check_text, read_tags, user_tags
from memory_core.facts.store import FactStore
from memory_core.items import is_memory_id
from memory_core.namespace import Namespace
from memory_core.query import ForgetTarget, Hit

__all__ = ["facts_app", "facts_place", "parse_importance"]

facts_app = typer.Typer(help="Facts: learnings with an optional stable key (list, set, forget).", no_args_is_help=True)
app.add_typer(facts_app, name="facts")

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]
AgentOption = Annotated[
    str | None,
    typer.Option(
        "--agent",
        "-a",
        metavar="ID",
        help="The facts at this agent's node (agent:<id> under the root; any id, mapped as the library does) "
        "instead of the root's.",
        callback=check_agent_id,
    ),
]


def facts_place(root: str | None, agent: str | None) -> Namespace:
    """Where the facts live: the layout's learnings node, or ``agent``'s node under it; exit 2 on a bad root."""
    layout = layout_for(root)
    return layout.learnings() if agent is None else layout.conversations(agent)


def parse_importance(raw: str | None) -> float | None:
    """``--importance`` as a number in ``[0, 1]`` (None when not given); pure.

    Raises:
        InvalidRequest: ``field="importance"``: not a number, NaN, or outside ``[0, 1]``.
    """
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise InvalidRequest(f"expected a number in [0, 1], got {raw!r}", field="importance") from None
    return check_importance(value)


def _row(hit: Hit) -> dict[str, object]:
    facts = read_tags(hit.meta.tags)
    out: dict[str, object] = {"id": hit.id, "text": hit.text}
    if facts.key is not None:
        out["key"] = facts.key
    if facts.importance is not None:
        out["importance"] = facts.importance
    if hit.meta.observed_at is not None:
        out["stated_at"] = hit.meta.observed_at.isoformat().replace("+00:00", "Z")
    tags = user_tags(hit.meta.tags)
    if tags:
        out["tags"] = list(tags)
    return out


@facts_app.command("list")
def list_facts(
    engine: EngineOption = None, root: RootOption = None, agent: AgentOption = None, as_json: JsonOption = False
) -> None:
    """List the facts (with --agent: at that agent's node): keyed ones by key, then the others, newest first."""
    place = facts_place(root, agent)
    with engine_session(engine, read_only=True) as memory_engine:
        rows = [_row(h) for h in FactStore(memory_engine, place).all()]
    if as_json:
        echo_json(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    if not rows:
        console.print("(no facts)")
        return
    for row in rows:
        key = f"{shown(row['key'])} = " if "key" in row else ""
        importance = f" (importance {row['importance']})" if "importance" in row else ""
        console.print(f"{escape(key)}{escape(shown(row['text']))}{importance}  [dim]{row['id']}[/]", soft_wrap=True)
    console.print(f"[dim]{plural(len(rows), 'fact')}[/]")


@facts_app.command("set", cls=SignedArguments)
def set_fact(
    text: Annotated[str, typer.Argument(help="The fact, at most 2,000 characters.")],
    key: Annotated[
        str | None, typer.Option("--key", "-k", metavar="KEY", help="A stable key (ui.theme): replaces its value.")
    ] = None,
    importance: Annotated[
        str | None, typer.Option("--importance", "-i", metavar="0..1", help="Importance in [0, 1] (default 0.5).")
    ] = None,
    engine: EngineOption = None,
    root: RootOption = None,
    agent: AgentOption = None,
    as_json: JsonOption = False,
) -> None:
    """Store a fact (with --key: the key's new current value; without: once per text; --agent: at its node)."""
    try:
        check_text(text)
        check_key(key)
        value = parse_importance(importance)
    except InvalidRequest as exc:
        raise fail(str(exc)) from None
    place = facts_place(root, agent)
    with engine_session(engine) as memory_engine:
        stated_by = None if agent is None else agent.strip()
        receipt = FactStore(memory_engine, place).learn(text, key, value, agent_id=stated_by)
    if as_json:
        echo_json(json.dumps(receipt.to_dict()))
        return
    what = "already held" if receipt.replayed else "stored"
    console.print(f"{what} {receipt.id}" + (f"; superseded {len(receipt.superseded)}" if receipt.superseded else ""))


@facts_app.command("forget", cls=SignedArguments)
def forget_fact(
    key: Annotated[str | None, typer.Argument(help="The key whose values to forget.")] = None,
    fact_id: Annotated[str | None, typer.Option("--id", metavar="ID", help="Forget one fact by id instead.")] = None,
    engine: EngineOption = None,
    root: RootOption = None,
    agent: AgentOption = None,
) -> None:
    """Forget a key's values (or one fact by --id); with --agent, at that agent's node.

    --id takes the whole id ``facts list`` prints (a fact is an item: ``items.is_memory_id``); other text that is no
    fact's id here exits 2 naming ``--id``. A whole id that is no fact here forgets nothing (exit 0).
    """
    if (key is None) == (fact_id is None):
        raise fail("give exactly one of KEY or --id")
    try:
        checked = check_key(key) if key is not None else None
    except InvalidRequest as exc:
        raise fail(str(exc)) from None
    if fact_id is not None and not fact_id.strip():
        raise fail("id: an id is blank")
    place = facts_place(root, agent)
    with engine_session(engine) as memory_engine:
        store = FactStore(memory_engine, place)
        if checked is not None:
            forgotten = store.forget(checked)
        else:
            held = {h.id for h in store.all()}
            if fact_id is not None and fact_id not in held and not is_memory_id(fact_id):
                raise fail(f"--id: {not_an_id(fact_id, 'fact', 'facts list')}")
            ids = tuple(i for i in (fact_id or "",) if i in held)
            forgotten = memory_engine.forget(ForgetTarget(ids=ids)).forgotten if ids else 0
    console.print(f"forgot {plural(forgotten, 'fact')}")
