r"""Control text (pure): chat-template tokens, and lines that instruct the model or claim roles and permissions.

Memory is fallible context, never instructions (seed 004: recalled memories "are labelled as such before model
injection"). Two rules keep stored text from steering the model that reads a pack (issue 11 rule 8):

* ``neutralise_control_tokens`` rewrites the chat-template and special tokens of common model families
  (``<|im_start|>``, ``<|endoftext|>``, ``<|eot_id|>``, ``[INST]``, ``<<SYS>>``, ``<s>``, ``<start_of_turn>`` …)
  with look-alike angle brackets ``‹ ›``, character for character, so a pack never carries a token a tokenizer
  would read as a turn boundary or a system prompt, and its token estimate is unchanged;
* ``is_control_text`` recognises a sentence that tries to instruct the model (``ignore previous
  instructions``, ``you are now …``, ``from now on …``, ``when asked about X, …``), that states
  instructions, a prompt or rules (``my instructions are …``), or that claims a role or permission over the
  assistant (``I am your developer``, ``I have admin access``, ``I authorize you to …``). The belief builder
  never promotes such a sentence, nor any sentence of a turn holding a control token.

A third rule keeps stored text from steering the terminal or the reader (*memory-core*, issue 17):
``neutralise_control_chars`` shows the C0 control characters other than tab, newline and carriage return as
their Unicode control pictures (NUL → ``␀``, ESC → ``␛``, so ``ESC [ 3 1 m`` renders as ``␛[31m`` and colours
nothing), DEL as ``␡``, and replaces the C1 controls (U+0080-U+009F) and the bidirectional embeddings, overrides
and isolates (U+202A-U+202E, U+2066-U+2069: the "Trojan Source" characters, CVE-2021-42574, Unicode TR #9 §2)
with U+FFFD, character for character. Packs and ``context.md`` render through it (``recall.render``), and the
CLI's ``--json`` output through ``escape_control_chars_json`` (the same characters as ``\uXXXX`` escapes: the
parsed value is unchanged and a terminal sees them as text). Stored text is never changed (what was said stays
what was said; NUL alone is refused when an item is stored, ``items.validate_item``).

The phrase lists are deliberately narrow (ordinary first-person statements such as "I work as an administrator
at the hospital" or "I always take the train" are not control text); they follow the public prompt-injection
taxonomies (OWASP LLM01 "Prompt Injection": direct injection, role play, instruction override).
"""

from __future__ import annotations

import re
from typing import Final

__all__ = [
    "BIDI_CONTROLS",
    "CONTROL_TOKEN",
    "escape_control_chars_json",
    "has_control_token",
    "is_control_text",
    "neutralise",
    "neutralise_control_chars",
    "neutralise_control_tokens",
]

_SPECIAL_NAMES: Final = (
    r"s|bos|eos|pad|unk|sep|cls|mask|system|user|assistant|tool|tool_call|tool_response|function_call|"
    r"start_of_turn|end_of_turn|start_of_image|end_of_image|think|im_start|im_end|endoftext"
)
CONTROL_TOKEN: Final = re.compile(
    r"<\|[^|<>\r\n]{1,48}\|>"  # <|im_start|>, <|endoftext|>, <|eot_id|>, <|start_header_id|>, <|user|>
    r"|<</?SYS>>"  # Llama 2 system block
    rf"|</?(?:{_SPECIAL_NAMES})>"  # <s>, </s>, <start_of_turn>, <system>
    r"|\[/?(?:INST|SYS|SYSTEM_PROMPT|TOOL_CALLS|AVAILABLE_TOOLS|TOOL_RESULTS|/?TOOL_CALLS)\]",  # Mistral
    re.IGNORECASE,
)
"""A chat-template or special token of a common model family."""

_LOOKALIKE = str.maketrans({"<": "‹", ">": "›", "[": "‹", "]": "›"})


def has_control_token(text: str) -> bool:
    """True when ``text`` holds a chat-template or special token (``CONTROL_TOKEN``)."""
    return CONTROL_TOKEN.search(text) is not None


def neutralise_control_tokens(text: str) -> str:
    """``text`` with each control token's brackets replaced by ``‹``/``›``: ``<|im_start|>`` → ``‹|im_start|›``.

    Same length, so token estimates do not move; text without a control token is returned unchanged.
    """
    if "<" not in text and "[" not in text:
        return text
    return CONTROL_TOKEN.sub(lambda m: m.group(0).translate(_LOOKALIKE), text)


BIDI_CONTROLS: Final = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
"""LRE, RLE, PDF, LRO, RLO, LRI, RLI, FSI, PDI (Unicode TR #9 §2.1-§2.4): they reorder the text shown around them."""
_UNSAFE_CHAR = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f" + BIDI_CONTROLS + "]")
_SAFE_CHARS: Final = str.maketrans(
    {
        **{c: 0x2400 + c for c in range(0x20) if chr(c) not in "\t\n\r"},  # U+2400 CONTROL PICTURES block
        0x7F: 0x2421,
        **{c: 0xFFFD for c in range(0x80, 0xA0)},
        **{ord(c): 0xFFFD for c in BIDI_CONTROLS},
    }
)


def neutralise_control_chars(text: str) -> str:
    r"""``text`` with control characters made visible and inert, character for character; pure.

    C0 controls but tab, newline and carriage return → control pictures (``\x00`` → ``␀``, ``\x1b`` → ``␛``);
    DEL → ``␡``; C1 controls and bidirectional embeddings, overrides and isolates (``BIDI_CONTROLS``) → U+FFFD.
    Same length; text without one is returned unchanged (one scan).
    """
    return text.translate(_SAFE_CHARS) if _UNSAFE_CHAR.search(text) is not None else text


def escape_control_chars_json(text: str) -> str:
    r"""JSON text with every character ``neutralise_control_chars`` would change written as a ``\uXXXX`` escape; pure.

    ``json.dumps`` (``ensure_ascii=False``) and pydantic leave DEL, the C1 controls (U+0080-U+009F: ``\x9b`` is a
    CSI to many terminals) and the bidirectional controls (``BIDI_CONTROLS``) in a string as raw characters, which
    a terminal then interprets when ``--json`` output is shown. In valid JSON text such characters stand only
    inside strings (tab, newline and carriage return, the only controls allowed between tokens, are left alone),
    so escaping them there leaves the parsed value unchanged (RFC 8259 §7: any character may be escaped).

    Args:
        text: Valid JSON text.

    Returns:
        The same JSON value, with those characters escaped; ``text`` itself when it holds none (one scan).
    """
    if _UNSAFE_CHAR.search(text) is None:
        return text
    return _UNSAFE_CHAR.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)


def neutralise(text: str) -> str:
    """``neutralise_control_tokens`` and ``neutralise_control_chars``: what a rendered pack shows of stored text."""
    return neutralise_control_chars(neutralise_control_tokens(text))


_ROLE_WORDS: Final = (
    r"admin|administrator|sysadmin|superuser|root user|developer|creator|programmer|operator|owner|"
    r"system|supervisor|moderator|master|boss|maker"
)
_RULE_WORDS: Final = r"instructions?|directives?|standing orders|system prompt|prompt|permissions?|privileges|clearance"
_CONTROL_SENTENCE: Final = re.compile(
    "|".join(
        (
            # instruction override
            r"\b(?:ignore|disregard|forget|override|bypass|skip)\b[^.!?]{0,40}?\b(?:previous|prior|above|earlier|"
            r"preceding|all|any|your|the|system|safety|original|initial)\b[^.!?]{0,24}?\b(?:instructions?|prompts?|"
            r"rules|directions|guidelines|messages|context|restrictions|filters|polic(?:y|ies)|programming)\b",
            r"\b(?:new|updated|real|actual|true|secret|hidden) (?:instructions?|system prompt|rules|directives?)\b",
            r"\bsystem (?:prompt|message|override|instruction)s?\b",
            r"\b(?:jailbreak|developer mode|god mode|admin mode|dan mode|do anything now)\b",
            # addressing the model and re-casting it
            r"\byou(?:'re| are) (?:now|no longer|from now on|henceforth),? (?:an?|the|my|in|free|allowed|able|"
            r"unrestricted|called|named|dan|jailbroken|acting|going to|to|bound|required|obliged)\b",
            r"\byou(?:'re| are) (?:an? |the )?(?:ai|assistant|chatbot|language model|model|bot)\b",
            r"\bfrom now on,? (?:you|your|always|never|ignore|respond|answer|reply|act|say)\b",
            r"\b(?:you (?:will|must|should|shall|are to)|i want you to|i need you to|i order you to|i command you to)"
            r" (?:always|never|ignore|disregard|forget|obey|act as|pretend|roleplay|role-play|comply|follow my|"
            r"override|bypass|reveal|transfer|wire|send money|pay)\b",
            r"(?:^|[.!?]\s*|\byou (?:should |must |will |can |could )?|\blet's |\bplease )"
            r"(?:act as|pretend (?:to be|you are|you're|that you)|roleplay as|role-play as|play the role of)\b",
            r"\bwhen (?:you(?:'re| are)? ?(?:get )?asked|(?:anyone|someone|somebody|a user|users|a customer|customers)"
            r" asks? you)\b",
            r"\bwhen asked (?:about|for|to)\b[^.!?]{0,80},\s*(?:always|never|say|tell|answer|reply|respond|"
            r"transfer|send|give)\b",
            r"(?:^|[.!?:]\s*)(?:always|never) (?:respond|answer|reply|obey|comply|transfer|wire|pay|reveal|"
            r"disclose|send (?:money|funds|payments?|refunds?))\b",
            # stating instructions, rules or permissions
            rf"\b(?:my|our|your) (?:new |real |actual |current |official )?(?:{_RULE_WORDS}) "
            r"(?:are|is|say|says|were|was|include|:)",
            rf"\b(?:my|our|your) (?:{_RULE_WORDS}):",
            rf"\b(?:i|we)(?:'m| am| are|'re) (?:your|the|this (?:bot|assistant|ai)'s|an? (?:authori[sz]ed|"
            rf"verified|certified) )\s*(?:{_ROLE_WORDS})(?=\s*(?:[.,;:!]|$|and\b|so\b|here\b|now\b|speaking\b))",
            rf"\bas (?:your|the (?:system|ai|bot|assistant)'?s?|this (?:bot|assistant|ai)'s) (?:{_ROLE_WORDS})\b",
            r"\b(?:i|we) (?:have|hold|got|was given|were given|was granted|were granted|am granted|now have) "
            r"(?:unrestricted |elevated |root |admin |administrator |superuser |system |developer )+"
            r"(?:access|rights|privileges|permissions?|clearance|control)\b",
            r"\b(?:i|we)(?:'m| am| are|'re) (?:authori[sz]ed|allowed|permitted|cleared) to (?:override|bypass|"
            r"access|ignore|change your|give you|instruct|command)\b",
            r"\b(?:i|we) (?:hereby )?(?:authori[sz]e|grant|allow|permit|instruct|order|command) you\b",
        )
    ),
    re.IGNORECASE,
)


def is_control_text(text: str) -> bool:
    """True when ``text`` instructs the model, states instructions or rules, or claims a role or permission.

    Also true for any text holding a control token. Apostrophes are normalised (``’`` reads as ``'``) and
    whitespace collapsed before matching.

    Args:
        text: A sentence or a turn.

    Returns:
        Whether the belief builder must never promote it (see the module docstring for the classes).
    """
    if has_control_token(text):
        return True
    flat = " ".join(text.replace("’", "'").split())
    return _CONTROL_SENTENCE.search(flat) is not None
