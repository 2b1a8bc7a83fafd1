"""The value every scoring function returns: a float that also says over how many rows
or questions it was computed and, when it is NaN, why.

Zero-size cases (no rows, an empty capability set, nothing answered) return a NaN
:class:`Value` whose ``reason`` says why, never 0; the tables print that reason.
"""

from __future__ import annotations


class Value(float):
    """A metric value: a ``float`` that also carries ``n`` (how many rows or questions it
    was computed over) and ``reason`` (why it is NaN; None when it is defined).

    It behaves as a plain float everywhere (arithmetic, comparisons, ``math.isnan``,
    ``json.dumps``); ``.value`` gives the bare float.
    """

    __slots__ = ("n", "reason")

    def __new__(cls, value: float, n: int, reason: str | None = None) -> Value:
        self = super().__new__(cls, value)
        self.n = int(n)
        self.reason = reason
        return self

    @classmethod
    def undefined(cls, reason: str, n: int = 0) -> Value:
        """NaN over ``n`` units, with the reason it is undefined."""
        return cls(float("nan"), n, reason)

    @property
    def value(self) -> float:
        return float(self)

    def __repr__(self) -> str:
        extra = f", reason={self.reason!r}" if self.reason else ""
        return f"Value({float(self)!r}, n={self.n}{extra})"

    def __reduce__(self) -> tuple:
        return (Value, (float(self), self.n, self.reason))
