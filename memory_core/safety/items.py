"""Scrub a ``StoreItem`` (reference §6.2 "What gets scrubbed, per item kind"); pure.

| kind | scrubbed |
| --- | --- |
| document | title and text body |
| conversation | each turn's text |
| learning | text and evidence |
| any | ``meta.url``: its query string and fragment, and a password in its user info |
| any | ``meta.file_path`` and ``meta.folder``, one path segment at a time; each of ``meta.tags`` |
| any | ``meta.observed_actor.name`` (free text: who said it) |

A path or tag holding no secret is kept exactly, so filters on it still match; one that holds a secret loses only
the secret (``/srv/token=[REDACTED]/app.log``). Ids are never rewritten: an id holding a credential is refused
(``memory_core.safety.ids``: ``InvalidRequest`` naming the field). Every other metadata field is left alone.
An item with nothing to scrub comes back as the same object.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

from memory_core.items import Conversation, Document, DocumentBody, Learning
from memory_core.meta import MemoryMeta
from memory_core.safety.detector import Policy
from memory_core.safety.ids import check_meta_ids
from memory_core.safety.scrub import scrub

__all__ = ["scrub_item", "scrub_meta", "scrub_path", "scrub_url"]

Item = Document | Conversation | Learning
"""A concrete stored item."""
_SEPARATORS = re.compile(r"([/\\])")


def scrub_url(url: str, policy: Policy | None = None) -> str:
    """``url`` with its query string, fragment and user-info password scrubbed; its path kept; pure.

    An OAuth redirect carries tokens in the query (``?code=…``) or the fragment (``#access_token=…``); the path
    is what folder and URL filters match, so it is kept.
    """
    try:
        parts = urlsplit(url)
    except ValueError:  # not a URL a parser accepts: scrub it as text
        return scrub(url, policy)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user, colon, password = userinfo.partition(":")
        if colon and password:
            netloc = f"{user}:[REDACTED]@{host}"
    query = scrub(parts.query, policy) if parts.query else parts.query
    fragment = scrub(parts.fragment, policy) if parts.fragment else parts.fragment
    if (netloc, query, fragment) == (parts.netloc, parts.query, parts.fragment):
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


def scrub_path(path: str, policy: Policy | None = None) -> str:
    """``path`` with each segment between slashes or backslashes scrubbed, the separators kept; pure.

    Segment by segment, so a secret in one folder name (``token=…``) never swallows the rest of the path.
    """
    parts = _SEPARATORS.split(path)
    scrubbed = [part if part in ("/", "\\") or not part else scrub(part, policy) for part in parts]
    return path if scrubbed == parts else "".join(scrubbed)


def scrub_meta(meta: MemoryMeta, policy: Policy | None = None) -> MemoryMeta:
    """``meta`` with its URL, file path, folder, tags and actor name scrubbed; the same object when nothing changed.

    Pure.

    Raises:
        InvalidRequest: one of its ids holds a credential (``check_meta_ids``), naming the field.
    """
    check_meta_ids(meta)
    changes: dict[str, object] = {}
    if meta.url is not None and (url := scrub_url(meta.url, policy)) != meta.url:
        changes["url"] = url
    for name in ("file_path", "folder"):
        value = getattr(meta, name)
        if value is not None and (path := scrub_path(value, policy)) != value:
            changes[name] = path
    tags = tuple(scrub(tag, policy) for tag in meta.tags)
    if tags != meta.tags:
        changes["tags"] = tags
    actor = meta.observed_actor
    if actor is not None and actor.name is not None and (name := scrub(actor.name, policy)) != actor.name:
        changes["observed_actor"] = actor.model_copy(update={"name": name})
    return meta.model_copy(update=changes) if changes else meta


def _meta(meta: MemoryMeta, policy: Policy | None) -> MemoryMeta:
    return scrub_meta(meta, policy)


def _opt(text: str | None, policy: Policy | None) -> str | None:
    return None if text is None else scrub(text, policy)


def scrub_item(item: Item, policy: Policy | None = None) -> Item:
    """The item with its text fields scrubbed (the table above); the same object when nothing changed; pure.

    Args:
        item: A document, conversation or learning.
        policy: The scrub policy; None: ``Policy.default()``.

    Raises:
        InvalidRequest: one of its ids holds a credential (``check_meta_ids``), naming the field.
    """
    meta = _meta(item.meta, policy)
    if isinstance(item, Document):
        title, text = _opt(item.title, policy), _opt(item.body.text, policy)
        if (title, text, meta) == (item.title, item.body.text, item.meta):
            return item
        body = item.body if text == item.body.text else DocumentBody(text=text)
        return item.model_copy(update={"title": title, "body": body, "meta": meta})
    if isinstance(item, Conversation):
        turns = tuple(
            turn if (clean := scrub(turn.text, policy)) == turn.text else turn.model_copy(update={"text": clean})
            for turn in item.turns
        )
        if meta is item.meta and all(a is b for a, b in zip(turns, item.turns, strict=True)):
            return item
        return item.model_copy(update={"turns": turns, "meta": meta})
    text, evidence = scrub(item.text, policy), _opt(item.evidence, policy)
    if (text, evidence, meta) == (item.text, item.evidence, item.meta):
        return item
    return item.model_copy(update={"text": text, "evidence": evidence, "meta": meta})
