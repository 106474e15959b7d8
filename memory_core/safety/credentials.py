"""Credential detectors: private-key blocks, credential markers and credential shapes (reference §6.2 passes 1-3).

Each is a ``Detector`` whose finder returns the spans to replace. Markers and ``key = value`` shapes keep their
prefix (``Bearer [REDACTED]``, ``api_key=[REDACTED]``); a token with a vendor prefix is replaced whole. The
vendor formats are the issuers' documented ones (GitHub's ``ghp_``/``github_pat_``, GitLab's ``glpat-``, AWS
``AKIA``/``ASIA`` access key ids, Google ``AIza`` keys, Stripe ``sk_live_``, Slack ``xox?-``, npm ``npm_``,
SendGrid ``SG.``, OpenAI/Anthropic ``sk-``), and JWTs are RFC 7519's three base64url segments.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final

from memory_core.safety.detector import Detector, Finder, Policy, Span, Stage, regex_spans

__all__ = ["CREDENTIAL_DETECTORS", "REDACTED", "REDACTED_PRIVATE_KEY", "looks_secret"]

REDACTED: Final = "[REDACTED]"
"""What a credential becomes."""
REDACTED_PRIVATE_KEY: Final = "[REDACTED_PRIVATE_KEY]"
"""What a private-key block becomes, whole."""

_B = r"(?<![A-Za-z0-9_-])"  # a token starts here: not inside a longer word or token
_E = r"(?![A-Za-z0-9_-])"  # and ends here

# 1. private keys: PEM (PKCS#1/#8, EC, DSA, ENCRYPTED), OpenSSH, PGP armour. An unterminated block (a pasted
# key cut short) is redacted to the end of the text: what follows its header cannot be told apart from it.
_PRIVATE_KEY = re.compile(
    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
    r"(?:.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|.*\Z)",
    re.DOTALL,
)

# 2. markers
_SECRET_URL = re.compile(r"/secret/(?P<v>[A-Za-z0-9_-]{6,})")  # one-time-secret links (onetimesecret.com/secret/…)
_BEARER = re.compile(r"(?<![A-Za-z0-9])bearer\s+(?P<v>[A-Za-z0-9._~+/=-]{8,})", re.IGNORECASE)
_AUTH_SCHEME = re.compile(
    r"(?<![A-Za-z0-9])authorization[\"']?\s*[:=]\s*[\"']?(?:basic|token|digest)[ \t]+(?P<v>[A-Za-z0-9._~+/=-]{6,})",
    re.IGNORECASE,
)
_CLI_PASSWORD = re.compile(r"(?<!\S)(?:-u|--user)[ \t]+[^\s:]+:(?P<v>[^\s\"']+)")  # curl -u user:password
_URL_PASSWORD = re.compile(r"://[^\s/:@]*:(?P<v>[^\s/@]+)@")  # scheme://user:password@host

# 3. shapes: key = value
_KEYS = (
    r"api[ _-]?key|access[ _-]?key|access[ _-]?token|refresh[ _-]?token|id[_-]?token|auth[ _-]?token|token"
    r"|client[ _-]?secret|secret[ _-]?access[ _-]?key|secret[ _-]?key|secret|passphrase|passcode|passwd|password|pwd"
    r"|account[_-]?key|shared[_-]?access[_-]?key|authorization[_-]?code|code[_-]?verifier|code[_-]?challenge"
    r"|private[ _-]?key|pass|pw"
)
_TAIL = (
    r"[\"']?(?P<sep>[ \t]*(?:=>|:=|[:=])\s*|[ \t]+(?:is|was|=|->|-)[ \t]*:?[ \t]*|[ \t]+)"
    r"(?:(?P<q>[\"'`])(?P<qv>[^\"'`\n]{1,256}(?:\r?\n[ \t]*[A-Za-z0-9_+/=.~-]{1,256}){0,8})(?P=q)"
    r"|(?P<v>(?:[^\s\"'`,;&<>(){}\[\]]|&(?![A-Za-z0-9_.-]+=)){1,512}))"
)
_KEY = re.compile(r"(?P<key>" + _KEYS + r")(?![a-z0-9])")  # on lower-cased text: a case-sensitive scan is 3× faster
_ASSIGNMENT_TAIL = re.compile(_TAIL, re.IGNORECASE)
_ASSIGNMENT = re.compile(r"(?<![A-Za-z0-9])(?P<key>" + _KEYS + r")(?![A-Za-z0-9])" + _TAIL, re.IGNORECASE)
_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_PROSE_AFTER_IS = frozenset(
    "wrong incorrect invalid expired correct strong weak too not very secure safe needed missing long short "
    "case same different set reset changed stored saved hashed encrypted private public shared new old mine "
    "yours here there below above ok fine good bad great easy hard simple complex unique known unknown "
    "sensitive confidential secret visible protected compromised leaked locked blank valid revoked active "
    "available ready used required".split()
)
_NOT_VALUES = frozenset(
    "none null nil true false required optional string undefined empty unset redacted hidden masked the a an "
    "is was and or of to in for on not str bytes bool boolean int integer float number dict list any object "
    "secretstr text keep see use".split()
)
_PASSWORD_KEYS = frozenset({"password", "passwd", "pwd", "passcode", "passphrase", "pw"})
"""Keys whose value after a bare space may be a short word with a digit (``password hunter2``)."""
_NOT_PASSWORDS = frozenset(
    "md5 sha1 sha256 sha384 sha512 sha3 utf8 utf16 base64 argon2 argon2id pbkdf2 2fa mfa".split()
)
_VERSION = re.compile(r"[vV]?\d+(?:\.\d+)+[a-z]?")
_CONTINUATION = re.compile(r"\r?\n[ \t]*(?P<run>[A-Za-z0-9_+/.~-]{8,}={0,2})(?=[\s\"'`,;)\]}]|\Z)")
"""The next line of a value wrapped at a line break: only token characters, 8 or more (as a wrapped vendor
token's, ``scrub.find``), then the end of the run."""
MAX_WRAPPED_LINES: Final = 16
"""Lines a wrapped value is followed over, at most."""
_CODE_REFERENCE = re.compile(r"[A-Za-z_][A-Za-z_]*(?:\.[A-Za-z_][A-Za-z_]*)+")  # os.environ, settings.SECRET_KEY
_NAMED = re.compile(r"[A-Za-z_]*(?:key|token|secret|pass|pwd|credential|auth)[A-Za-z_]*", re.IGNORECASE)
_PLACEHOLDER = re.compile(r"(?:your|my)[_-].*|[A-Z][A-Z_]*_[A-Z_]+", re.IGNORECASE)


def looks_secret(value: str) -> bool:
    """A value that reads like a generated secret: 8+ characters with a digit and a letter, or 20+ of 2+ classes.

    The gate for a credential word followed only by a space (``token abc123def``), where prose is likelier
    ("the token limit"); pure.
    """
    if len(value) < 8:
        return False
    digit = any(c.isdigit() for c in value)
    letter = any(c.isalpha() for c in value)
    if digit and letter:
        return True
    classes = sum((any(c.islower() for c in value), any(c.isupper() for c in value), digit, not value.isalnum()))
    return len(value) >= 20 and classes >= 2


def _password_word(value: str) -> bool:
    """A value after ``password`` and a bare space that is a password: 6+ characters, a letter and a digit.

    ``password hunter2``; not a version (``v1.2.3``), a hash or encoding name (``sha256``, ``utf8``) or prose.
    """
    word = value.rstrip(".,:;!?")
    if len(word) < 6 or not any(c.isdigit() for c in word) or not any(c.isalpha() for c in word):
        return False
    return word.lower() not in _NOT_PASSWORDS and _VERSION.fullmatch(word) is None


def _random_run(run: str) -> bool:
    return any(c.isdigit() for c in run) and any(c.isalpha() for c in run)


def wrapped_end(text: str, end: int) -> int:
    """Where a value ending at ``end`` really ends when it was wrapped over the next lines; pure.

    A value cut by a line break (a ``key=value`` or a ``Bearer`` token pasted from a terminal at 76 columns)
    continues on each next line that holds, after its indentation, only a run of 8+ token characters with a
    letter and a digit (so ``region=eu`` or a line of prose never joins it); at most ``MAX_WRAPPED_LINES``.
    """
    for _ in range(MAX_WRAPPED_LINES):
        more = _CONTINUATION.match(text, end)
        if more is None or not _random_run(more.group("run")):
            break
        end = more.end()
    return end


def _wrapping(finder: Finder) -> Finder:
    """``finder`` with each span of 8+ characters extended over the lines its value was wrapped onto."""

    def spans(text: str, policy: Policy, start: int, end: int) -> Iterator[Span]:
        for lo, hi in finder(text, policy, start, end):
            yield lo, (wrapped_end(text, hi) if hi - lo >= 8 else hi)

    return spans


def _plausible(value: str) -> bool:
    stripped = value.strip()
    if len(stripped) < 4 or stripped.lower().rstrip(".,:;!?") in _NOT_VALUES:
        return False
    if stripped.isdigit() and len(stripped) < 6:  # max_token=4096, port: 8080
        return False
    return not (stripped[0] in "$<{%[" or set(stripped) <= set("*x.•X"))  # ${TOKEN}, <your key>, ****


def _code(value: str, match: re.Match[str], text: str) -> bool:
    """The value is code, not a secret.

    A call or index (``os.environ[…]``, ``input()``), a dotted reference (``settings.SECRET_KEY``), a variable
    named for what it holds (``api_key=api_key``), a placeholder (``YOUR_API_KEY``, ``your-token``).
    """
    if match.group("v") is not None and match.end() < len(text) and text[match.end()] in "([":
        return True
    if _CODE_REFERENCE.fullmatch(value) or _NAMED.fullmatch(value):
        return True
    return _PLACEHOLDER.fullmatch(value) is not None and not any(c.isdigit() for c in value)


def _assignment_gate(match: re.Match[str], key: str, text: str) -> bool:
    value = match.group("qv") if match.group("qv") is not None else match.group("v")
    sep = match.group("sep").strip()
    if key.lower() == "pass" and sep not in {":", "=", ":=", "=>"}:
        return False  # "pass" is a key only in "pass: …" / "pass=…" ("pass the salt", "pass is valid")
    if key.lower() == "pw" and sep not in {":", "=", ":=", "=>"}:
        return False  # "pw" only in "pw: …" / "PW=…"
    if "\n" in value:  # a quoted value wrapped over lines: a token (no spaces) cut at a line break, not prose
        first, _, rest = value.partition("\n")
        if len(first) < 8 or " " in first.strip() or not _random_run(rest):
            return False
    if sep in {"is", "was", "-", "->"}:  # "my password is hunter2", "password - hunter2"; not "… is wrong"
        secret = _plausible(value) and value.lower().rstrip(".,:;!?") not in _PROSE_AFTER_IS
    elif not sep:  # "token abc123def": prose is likelier here ("the token limit")
        lowered = key.lower().replace(" ", "").replace("_", "").replace("-", "")
        secret = looks_secret(value) or (lowered in _PASSWORD_KEYS and _password_word(value))
    else:
        secret = _plausible(value)
    return secret and not _code(value, match, text)


def _value_span(match: re.Match[str], text: str) -> Span:
    if match.group("qv") is not None:
        return match.span("qv")
    start, end = match.span("v")
    return start, (wrapped_end(text, end) if end - start >= 8 else end)


def _assignment_spans(text: str, policy: Policy, start: int, end: int) -> Iterator[Span]:
    """``key = value`` pairs: the key words found in the lower-cased text, then the separator and value read."""
    lowered = text.lower()
    if len(lowered) != len(text):  # a character whose lower case is longer: read the original, slower
        for match in _ASSIGNMENT.finditer(text, start, end):
            if _assignment_gate(match, match.group("key"), text):
                yield _value_span(match, text)
        return
    taken = start
    for key in _KEY.finditer(lowered, start, end):
        at = key.start()
        if at < taken or (at > 0 and lowered[at - 1] in _ALNUM and not (text[at].isupper() and text[at - 1].islower())):
            continue  # inside a value read, or a word ("monkey"; "tokens" fails the key), not camelCase (sessionToken)
        tail = _ASSIGNMENT_TAIL.match(text, key.end(), end)
        if tail is not None and _assignment_gate(tail, key.group("key"), text):
            span = _value_span(tail, text)
            yield span
            taken = max(tail.end(), span[1])


def _bearer_gate(match: re.Match[str], text: str, policy: Policy) -> bool:
    return looks_secret(match.group("v"))  # "ring bearer", "bearer ceremony", "bearer 2024-05-17" stay


_TELEGRAM = r"\d{8,10}:AA[0-9A-Za-z_-]{33,}" + _E  # a bot token: bot id, colon, secret


def _shape(name: str, pattern: str, *needles: str, prefilter: str | None = None) -> Detector:
    return Detector(
        name,
        Stage.SHAPE,
        REDACTED,
        regex_spans(re.compile(_B + pattern + _E)),
        needles=needles,
        prefilter=None if prefilter is None else re.compile(prefilter),
        wrappable=prefilter is None,
        glued=re.compile(pattern + _E),  # the same token glued after a "-" or "_" (safety.glued)
    )


CREDENTIAL_DETECTORS: Final[tuple[Detector, ...]] = (
    Detector(
        "private_key", Stage.PRIVATE_KEY, REDACTED_PRIVATE_KEY, regex_spans(_PRIVATE_KEY), needles=("private key",)
    ),
    Detector("secret_url", Stage.MARKER, REDACTED, regex_spans(_SECRET_URL, "v"), needles=("/secret/",)),
    Detector("bearer", Stage.MARKER, REDACTED, _wrapping(regex_spans(_BEARER, "v", _bearer_gate)), needles=("bearer",)),
    Detector(
        "authorization",
        Stage.MARKER,
        REDACTED,
        _wrapping(regex_spans(_AUTH_SCHEME, "v")),
        needles=("authorization",),
    ),
    Detector("url_password", Stage.MARKER, REDACTED, regex_spans(_URL_PASSWORD, "v"), needles=("://",)),
    Detector(
        "cli_password",
        Stage.MARKER,
        REDACTED,
        regex_spans(_CLI_PASSWORD, "v", lambda m, t, p: _plausible(m.group("v"))),
        needles=("-u ", "--user"),
    ),
    _shape("anthropic_key", r"sk-ant-[A-Za-z0-9_-]{20,}", "sk-ant-"),
    _shape("openai_key", r"sk-(?:proj-|org-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}", "sk-"),
    _shape(
        "github_token",
        r"(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",
        *("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    _shape("gitlab_token", r"glpat-[A-Za-z0-9_-]{20,}", "glpat-"),
    _shape("aws_access_key", r"(?:AKIA|ASIA)[A-Z0-9]{16}", "akia", "asia"),
    _shape("google_api_key", r"AIza[0-9A-Za-z_-]{35}", "aiza"),
    _shape("stripe_key", r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}", "sk_live_", "sk_test_", "rk_live_", "rk_test_"),
    _shape("slack_token", r"xox[abpsr]-[A-Za-z0-9-]{10,}", "xoxa-", "xoxb-", "xoxp-", "xoxs-", "xoxr-"),
    _shape("npm_token", r"npm_[A-Za-z0-9]{36}", "npm_"),
    _shape("sendgrid_key", r"SG\.[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{16,64}", "sg."),
    _shape("jwt", r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*", "eyj"),
    _shape("huggingface_token", r"hf_[A-Za-z0-9]{30,}", "hf_"),
    _shape("pypi_token", r"pypi-AgE[A-Za-z0-9_-]{50,}", "pypi-"),
    _shape("shopify_token", r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}", "shpat_", "shpca_", "shppa_", "shpss_"),
    _shape("digitalocean_token", r"do[opr]_v1_[a-f0-9]{64}", "doo_v1_", "dop_v1_", "dor_v1_"),
    _shape("mailgun_key", r"key-[0-9a-f]{32}", prefilter=r"key-[0-9a-f]{8}"),
    _shape("twilio_key", r"SK[0-9a-fA-F]{32}", prefilter=r"SK[0-9a-fA-F]{8}"),
    _shape("square_token", r"sq0(?:atp|csp)-[0-9A-Za-z_-]{22,}", "sq0atp-", "sq0csp-"),
    Detector(
        "telegram_bot_token",
        Stage.SHAPE,
        REDACTED,
        regex_spans(re.compile(r"(?:(?<=/bot)|(?<![A-Za-z0-9_-]))" + _TELEGRAM)),
        needles=(":aa",),
        prefilter=re.compile(r"\d{8,10}:AA"),  # where a bot token starts (one glued after a hyphen included)
        glued=re.compile(_TELEGRAM),
    ),
    Detector(
        "webhook_url",
        Stage.SHAPE,
        REDACTED,
        regex_spans(
            re.compile(r"(?:hooks\.slack\.com/services|discord(?:app)?\.com/api/webhooks)/(?P<v>[A-Za-z0-9_/-]{20,})"),
            "v",
        ),
        needles=("hooks.slack.com", "/api/webhooks/"),
    ),
    Detector(
        "credential_assignment",
        Stage.SHAPE,
        REDACTED,
        _assignment_spans,
        needles=("key", "token", "secret", "pass", "pw", "code"),
    ),
)
"""Passes 1-3 of reference §6.2 in order; a vendor shape runs before the generic ``key = value``."""
