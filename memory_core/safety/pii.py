"""Checksum-gated personal identifiers (reference §6.2 pass 4); each becomes ``[REDACTED_PII_<CLASS>]``.

The checksums come from python-stdnum (Luhn, ISO 13616 IBAN mod-97, Verhoeff, the Brazilian and Argentine
mod-11 check digits, the Spanish check letter); the US SSN area/group/serial rules are the Social Security
Administration's, the UK NINO prefix rules HMRC's (National Insurance Manual NIM39110). A bare run of digits,
which order numbers and ids also are, counts only with corroboration (``Policy.corroborated``): a separator
layout the class is written in, an IIN prefix for cards, or the class's keyword within 64 characters.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import date
from typing import Final

from stdnum import iban, luhn
from stdnum.ar import cuit
from stdnum.br import cnpj, cpf
from stdnum.es import dni, nie
from stdnum.in_ import aadhaar

from memory_core.safety.detector import Detector, Finder, Policy, Span, Stage, near, regex_spans

__all__ = ["EMAIL", "PII_DETECTORS", "pii_replacement"]

EMAIL: Final = "EMAIL"
"""The email class: detected always, redacted only under ``Policy.redact_emails``."""

_NB = r"(?<![\w.+-])"  # a number starts here (not inside a word, a decimal, a version or an id)
_NE = r"(?![\w-]|\.\d)"  # and ends here


def pii_replacement(pii_class: str) -> str:
    """``[REDACTED_PII_<CLASS>]``."""
    return f"[REDACTED_PII_{pii_class}]"


def _digits(text: str) -> str:
    return "".join(c for c in text if c.isdigit())


def _keywords(*words: str) -> re.Pattern[str]:
    return re.compile(r"(?<![A-Za-z])(?:" + "|".join(words) + r")(?![A-Za-z])", re.IGNORECASE)


def _formatted(match: re.Match[str]) -> bool:
    return not match.group(0).isdigit()


def _gated(valid: Callable[[str], bool], keywords: re.Pattern[str]) -> Callable[[re.Match[str], str, Policy], bool]:
    """Valid by its checksum, and written in its layout or named by a keyword nearby."""

    def gate(match: re.Match[str], text: str, policy: Policy) -> bool:
        if not valid(match.group(0)):
            return False
        return _formatted(match) or near(text, *match.span(), keywords)

    return gate


def _valid(module: object) -> Callable[[str], bool]:
    check: Callable[[str], bool] = getattr(module, "is_valid")  # noqa: B009 - one helper for every stdnum module
    return check


# cards -------------------------------------------------------------------------------------------------------
_CARD = re.compile(_NB + r"\d(?:(?:[ -]|\r?\n)?\d){12,18}" + _NE)
_CARD_WORDS = _keywords(
    r"card",
    r"credit",
    r"debit",
    r"visa",
    r"master ?card",
    r"amex",
    r"american express",
    r"discover",
    r"maestro",
    r"cvv",
    r"cvc",
    r"exp(?:iry|ires|iration)?",
    r"pan",
    r"cc",
    r"payment",
    r"pay",
    r"billing",
    r"jcb",
    r"diners",
)


def _iin(digits: str) -> bool:
    """An issuer prefix of a major scheme (Visa, Mastercard, Amex, Discover, JCB, Diners, UnionPay, Maestro)."""
    two, three, four = int(digits[:2]), int(digits[:3]), int(digits[:4])
    return (
        digits[0] == "4"
        or 51 <= two <= 55
        or 2221 <= four <= 2720
        or two in {34, 37, 36, 38, 62, 65, 50}
        or 300 <= three <= 305
        or 3528 <= four <= 3589
        or four == 6011
        or 644 <= three <= 649
        or 56 <= two <= 69
    )


def _card_spans(text: str, policy: Policy, begin: int, stop: int) -> Iterator[Span]:
    for match in _CARD.finditer(text, begin, stop):
        start, run = match.start(), match.group(0)
        # try the whole run, then shorter cuts at a separator leaving at most 6 digits ("4111 1111 1111 1111 12 27"
        # holds a card and a date; a 22-digit tracking number in groups of four holds no card)
        cuts = [len(run)] + [i for i in range(len(run) - 1, 0, -1) if not run[i].isdigit() and run[i - 1].isdigit()]
        total = len(_digits(run))
        for cut in cuts:
            if total - len(_digits(run[:cut])) > 6:
                break
            candidate = run[:cut]
            digits = _digits(candidate)
            if not 13 <= len(digits) <= 19 or not luhn.is_valid(digits):
                continue
            bare = candidate.isdigit()
            if bare and policy.corroborated and not (_iin(digits) or near(text, start, start + cut, _CARD_WORDS)):
                continue
            yield start, start + cut
            break


# IBAN --------------------------------------------------------------------------------------------------------
_IBAN = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?:[ \n]?[A-Z0-9]){11,30}(?![a-z0-9])")


def _iban_spans(text: str, policy: Policy, begin: int, stop: int) -> Iterator[Span]:
    for match in _IBAN.finditer(text, begin, stop):
        start, run = match.start(), match.group(0)
        ends = [
            i + 1
            for i in range(len(run) - 1, 13, -1)
            if not run[i].isspace() and (i + 1 == len(run) or run[i + 1].isspace())
        ]
        for end in ends or [len(run)]:
            if iban.is_valid(run[:end].replace("\n", " ")):
                yield start, start + end
                break


# national numbers --------------------------------------------------------------------------------------------
_CPF = re.compile(_NB + r"\d{3}\.?\d{3}\.?\d{3}-?\d{2}" + _NE)
_CNPJ = re.compile(_NB + r"\d{2}\.?\d{3}\.?\d{3}/?\d{4}-?\d{2}" + _NE)
_CUIT = re.compile(_NB + r"(?:20|23|24|27|30|33|34)-?\d{8}-?\d" + _NE)
_AADHAAR = re.compile(_NB + r"[2-9]\d{3}[ -]?\d{4}[ -]?\d{4}" + _NE)
_MY_NUMBER = re.compile(_NB + r"\d{4}[ -]?\d{4}[ -]?\d{4}" + _NE)
_MY_NUMBER_WORDS = re.compile(r"my ?number|individual number|マイナンバー|個人番号|kojin", re.IGNORECASE)
_SSN = re.compile(_NB + r"\d{3}(?P<s>[- ]?)\d{2}(?P=s)\d{4}" + _NE)
_DNI = re.compile(_NB + r"\d{8}-?[A-Za-z](?![\w-])")
_NIE = re.compile(r"(?<![\w-])[XYZxyz]-?\d{7}-?[A-Za-z](?![\w-])")
_NINO = re.compile(r"(?<![A-Za-z0-9])(?P<p>[A-Z]{2}) ?\d{2} ?\d{2} ?\d{2} ?[A-D](?![A-Za-z0-9])")
_NINO_BAD_PREFIXES = frozenset({"BG", "GB", "KN", "NK", "NT", "TN", "ZZ"})
_RFC = re.compile(r"(?<![A-Za-z0-9])[A-ZÑ&]{3,4}(?P<d>\d{6})[A-Z0-9]{3}(?![A-Za-z0-9])")
_PAN = re.compile(r"(?<![A-Za-z0-9])[A-Z]{3}(?P<t>[A-Z])[A-Z]\d{4}[A-Z](?![A-Za-z0-9])")
_PAN_WORDS = _keywords("pan", "permanent account number", "income tax")
_NINO_WORDS = _keywords("nino", r"ni number", r"ni no", "national insurance")
_RRN = re.compile(_NB + r"(?P<d>\d{6})-[1-8]\d{6}" + _NE)


def _nino_gate(match: re.Match[str], text: str, policy: Policy) -> bool:
    """HMRC's prefix rules; a prefix they rule out (``QQ``, HMRC's own example) counts when the NINO is named."""
    prefix = match.group("p")
    if prefix[0] not in "DFIQUV" and prefix[1] not in "DFIQUVO" and prefix not in _NINO_BAD_PREFIXES:
        return True
    return near(text, *match.span(), _NINO_WORDS)


def _pan_gate(match: re.Match[str], text: str, policy: Policy) -> bool:
    """The 4th letter names a holder type (P person, C company, …), or the PAN is named nearby."""
    return match.group("t") in "ABCFGHLJPTK" or near(text, *match.span(), _PAN_WORDS)


def _ssn_valid(digits: str) -> bool:
    """The SSA's range rules: area not 000, 666 or 9xx; group not 00; serial not 0000."""
    area, group, serial = digits[:3], digits[3:5], digits[5:]
    return area not in {"000", "666"} and not area.startswith("9") and group != "00" and serial != "0000"


def _yymmdd(value: str) -> bool:
    try:
        date(2000 + int(value[:2]), int(value[2:4]), int(value[4:6]))
    except ValueError:
        return False
    return True


def _dated(match: re.Match[str], text: str, policy: Policy) -> bool:
    return _yymmdd(match.group("d"))


def _ssn_gate(match: re.Match[str], text: str, policy: Policy) -> bool:
    if not _ssn_valid(_digits(match.group(0))):
        return False
    return bool(match.group("s")) or near(text, *match.span(), _keywords("ssn", r"social security"))


def _my_number_gate(match: re.Match[str], text: str, policy: Policy) -> bool:
    return near(text, *match.span(), _MY_NUMBER_WORDS)


_DIGIT_RUN = re.compile(r"\d[\d .()/+\r\n-]{5,}\d")
"""Where a digit-run class can be: 7+ characters of digits and separators, starting and ending with a digit."""
_LETTERS_DIGITS = re.compile(r"[A-Z]{2} ?\d\d")
"""What every letter-and-digit class (IBAN, NINO, RFC, PAN) holds somewhere."""


def _class(
    name: str,
    finder: Finder,
    variant: str = "",
    *,
    digits: bool = True,
    prefilter: re.Pattern[str] | None = None,
    needles: tuple[str, ...] = (),
) -> Detector:
    detector = f"pii_{name.lower()}" + (f"_{variant}" if variant else "")
    return Detector(
        detector,
        Stage.PII,
        pii_replacement(name),
        finder,
        pii_class=name,
        prefilter=prefilter,
        needles=needles,
        windows=_DIGIT_RUN if digits and prefilter is None else None,
    )


# phones and emails -------------------------------------------------------------------------------------------
_E164 = re.compile(r"(?<![\w+])\+[1-9](?:[ .-]?\(?\d\)?){7,14}" + _NE)
_NANP = re.compile(
    r"(?<![\w+-])(?:\+?1[ .-]?)?(?:\([2-9]\d{2}\)[ ]?|[2-9]\d{2}[ .-])[2-9]\d{2}[ .-]\d{4}" + _NE
)  # separators: a bare 10-digit run needs a phone word (``_NANP_BARE``)
_NANP_BARE = re.compile(_NB + r"(?:\+?1)?[2-9]\d{2}[2-9]\d{6}" + _NE)
"""A NANP number written as one digit run (``4155552671``, ``14155552671``): found only with a phone word."""
_PHONE_WORDS = _keywords(
    "phone",
    "phones",
    "cell",
    "cellphone",
    "mobile",
    "tel",
    "telephone",
    "call",
    "text",
    "sms",
    "whatsapp",
    "fax",
    "dial",
    "ring",
    "reach me",
    "contact",
    "number is",
    "my number",
    "his number",
    "her number",
    "their number",
)
"""Words before a bare digit run (within 32 characters) that say it is a phone number; "order number" is not one."""
_PHONE_LABEL_AFTER = re.compile(r"[ \t]*[(\[]?(?:phone|cell|mobile|tel|home|work|office)(?![A-Za-z])", re.IGNORECASE)
"""A label right after the run: ``4155552671 (cell)``."""
_ID_RIGHT_BEFORE = re.compile(
    r"(?<![A-Za-z])(?:order|invoice|account|acct|tracking|ticket|ref|reference|id|sku|serial|isbn|case|po|batch"
    r"|customer|confirmation|booking|transaction|txn)\W{0,3}(?:number|num|no|nr|id|#)?\W{0,3}\Z",
    re.IGNORECASE,
)
"""An id word right before the run (``order 4155552671``, ``invoice no. 4155552671``): an id, not a phone."""


def _nanp_bare_gate(match: re.Match[str], text: str, policy: Policy) -> bool:
    """NANP numbering plan rules (area and exchange codes N(2-9)XX, not N11) and a phone word naming the run.

    The plan: https://nationalnanpa.com/number_resource_info/ (area codes and central office codes). A bare run
    that passes them is still an order number, a timestamp or an id far more often than a phone, so it is a phone
    only with a phone word within 32 characters before it (``call me at``, ``cell:``) or a label right after it
    (``(cell)``), and never right after an id word (``order``, ``invoice no.``). Without them a bare 10-digit
    number is left alone (reference §6.2's known limit).
    """
    digits = match.group(0).lstrip("+")
    if len(digits) == 11 and digits[0] != "1":
        return False
    national = digits[-10:]
    if national[1:3] == "11" or national[4:6] == "11":
        return False
    start, end = match.span()
    before = text[max(0, start - 32) : start]
    if _ID_RIGHT_BEFORE.search(before):
        return False
    return _PHONE_WORDS.search(before) is not None or _PHONE_LABEL_AFTER.match(text, end) is not None


_EMAIL_DOMAIN = re.compile(r"@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![\w-])")
_EMAIL_LOCAL = re.compile(r"(?<![\w.+-])[A-Za-z0-9._%+-]{1,64}\Z")


def _email_spans(text: str, policy: Policy, begin: int, stop: int) -> Iterator[Span]:
    """``local@domain.tld``: found from its ``@`` (a scan for the local part first is 10× slower on prose)."""
    for domain in _EMAIL_DOMAIN.finditer(text, begin, stop):
        local = _EMAIL_LOCAL.search(text, max(begin, domain.start() - 64), domain.start())
        if local is not None:
            yield local.start(), domain.end()


def _e164_gate(match: re.Match[str], text: str, policy: Policy) -> bool:
    return 8 <= len(_digits(match.group(0))) <= 15


PII_DETECTORS: Final[tuple[Detector, ...]] = (
    _class("IBAN", _iban_spans, prefilter=_LETTERS_DIGITS),
    _class("BR_CNPJ", regex_spans(_CNPJ, gate=_gated(_valid(cnpj), _keywords("cnpj")))),
    _class("BR_CPF", regex_spans(_CPF, gate=_gated(_valid(cpf), _keywords("cpf")))),
    _class("AR_CUIT", regex_spans(_CUIT, gate=_gated(_valid(cuit), _keywords("cuit", "cuil")))),
    _class("KR_RRN", regex_spans(_RRN, gate=_dated)),
    _class("US_SSN", regex_spans(_SSN, gate=_ssn_gate)),
    _class("JP_MY_NUMBER", regex_spans(_MY_NUMBER, gate=_my_number_gate)),
    _class("IN_AADHAAR", regex_spans(_AADHAAR, gate=_gated(_valid(aadhaar), _keywords("aadhaar", "aadhar", "uidai")))),
    _class("CARD", _card_spans),
    _class("ES_DNI", regex_spans(_DNI, gate=lambda m, t, p: dni.is_valid(m.group(0)))),
    _class("ES_NIE", regex_spans(_NIE, gate=lambda m, t, p: nie.is_valid(m.group(0)))),
    _class("UK_NINO", regex_spans(_NINO, gate=_nino_gate), prefilter=_LETTERS_DIGITS),
    _class("MX_RFC", regex_spans(_RFC, gate=_dated), prefilter=_LETTERS_DIGITS),
    _class("IN_PAN", regex_spans(_PAN, gate=_pan_gate), prefilter=_LETTERS_DIGITS),
    _class("PHONE", regex_spans(_E164, gate=_e164_gate), "e164"),
    _class("PHONE", regex_spans(_NANP), "nanp"),
    _class("PHONE", regex_spans(_NANP_BARE, gate=_nanp_bare_gate), "nanp_bare"),
    _class(EMAIL, _email_spans, digits=False, needles=("@",)),
)
"""Pass 4 of reference §6.2; where two classes match the same characters the earlier one names them."""
