"""What each setting accepts: the value kinds of `spark_provider.settings`, each turning a keyword's or a Spark
conf's value into the conf string the provider reads, or refusing it with the words the Java provider uses too
(`ProviderSettings.java`: "expected an integer of at least 0", "expected one of zstd, none", ...)."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

_INT_MAX = 2**31 - 1


class SettingError(ValueError):
    """A statestore setting's value is refused: the message names the setting, the value and what is allowed."""


class BadValue(ValueError):
    """Raised by a kind: the value is not one it accepts (the caller names the setting)."""


@dataclass(frozen=True)
class Text:
    """Any string, or a path (an empty string: unset)."""

    expected: str = "a string"

    def conf(self, value: object) -> str:
        if isinstance(value, (str, os.PathLike)):
            return str(os.fspath(value)).strip()
        raise BadValue(self.expected)


@dataclass(frozen=True)
class Choice:
    """One of a few words, case-insensitive (the conf holds it in lower case)."""

    values: tuple[str, ...]

    @property
    def expected(self) -> str:
        return "one of " + ", ".join(self.values)

    def conf(self, value: object) -> str:
        word = value.strip().lower() if isinstance(value, str) else None
        if word not in self.values:
            raise BadValue(self.expected)
        return word


@dataclass(frozen=True)
class Flag:
    """true or false (a bool, or the words in any case)."""

    expected: str = "true or false"

    def conf(self, value: object) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower()
        raise BadValue(self.expected)


@dataclass(frozen=True)
class Integer:
    """A whole number from `low` (to `high`, when given; else to 2**31 - 1, the provider's int range)."""

    low: int
    high: int | None = None

    @property
    def expected(self) -> str:
        if self.high is None:
            return f"an integer of at least {self.low}"
        return f"an integer from {self.low} to {self.high}"

    def conf(self, value: object) -> str:
        if isinstance(value, bool):
            raise BadValue(self.expected)
        if isinstance(value, int):
            number = value
        elif isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]+", value.strip()):
            number = int(value.strip())  # Java's Integer.parseInt takes no `_` and one sign
        else:
            raise BadValue(self.expected)
        if number < self.low or number > (_INT_MAX if self.high is None else self.high):
            raise BadValue(self.expected)
        return str(number)


_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


@dataclass(frozen=True)
class Number:
    """A finite decimal number over `low` (or at least `low`, when `inclusive`)."""

    low: int
    inclusive: bool = False

    @property
    def expected(self) -> str:
        return f"a number of at least {self.low}" if self.inclusive else f"a number over {self.low}"

    def conf(self, value: object) -> str:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise BadValue(self.expected)
        if isinstance(value, str) and not _DECIMAL.fullmatch(value.strip()):
            raise BadValue(self.expected)  # what Java's Double.parseDouble would refuse when the query starts
        try:
            number = float(value)
        except ValueError:
            raise BadValue(self.expected) from None
        if not math.isfinite(number) or number < self.low or (number == self.low and not self.inclusive):
            raise BadValue(self.expected)
        # As Python writes a float (a numpy float's repr names its type): Java parses every such form.
        if isinstance(value, str):
            return value.strip()
        return repr(value) if isinstance(value, int) else repr(float(number))


@dataclass(frozen=True)
class Address:
    """host:port, the port from 1 to 65535 (an empty string: unset)."""

    expected: str = "host:port with a port from 1 to 65535"

    def conf(self, value: object) -> str:
        if not isinstance(value, str):
            raise BadValue(self.expected)
        if not value.strip():
            return ""  # unset
        host, _, port = value.strip().rpartition(":")
        if not host or not port.isdigit() or not port.isascii() or not 1 <= int(port) <= 65535:
            raise BadValue(self.expected)
        return value.strip()


Kind = Text | Choice | Flag | Integer | Number | Address
