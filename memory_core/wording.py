"""Counts in sentences people read (pure).

One place for plurals, so the CLI's summaries and the lifecycle's reports (``RetentionPlan.describe``) never
print "1 turns".
"""

from __future__ import annotations

__all__ = ["plural"]


def plural(n: float, word: str, many: str | None = None) -> str:
    """``"1 job"``, ``"2 jobs"``; ``many`` when the plural is not ``word + "s"``.

    Args:
        n: The count; a float is written in its shortest form (``1.5 days``, ``1 day`` for ``1.0``).
        word: The singular.
        many: The plural, when it is not ``word + "s"``.
    """
    number = f"{n:g}" if isinstance(n, float) else str(n)
    return f"{number} {word if n == 1 else (many or word + 's')}"
