"""A ladder of ways to make one model, tightest first: the first that works is kept, and
when none does, the first one's failure is the finding, with the others' after it.

The transformers registry climbs its shrink levels (``shrink.LEVELS``): a model whose tiny
config fails to build or run is tried with a gentler shrink. A failure no gentler level can
mend (too many parameters already, an input no rule makes) stops the climb. Knows no
transformers and no pytest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from pytest_fxtrace.zoo.errors import ZooError

Level = TypeVar("Level")
Made = TypeVar("Made")
SHOWN = 160  # characters of each gentler level's failure in the message


class Final(ZooError):
    """A failure that every gentler level would repeat: the climb stops here."""


class Skip(ZooError):
    """A level with nothing new to try (the same model as an earlier level's): passed over,
    not a failure to report."""


class Climbed(Generic[Level, Made]):
    """What the climb made, at which level, and why each level below it failed."""

    def __init__(self, level: Level, made: Made, failures: Sequence[tuple[Level, str]]) -> None:
        self.level = level
        self.made = made
        self.failures = tuple(failures)


def climb(
    levels: Sequence[Level], attempt: Callable[[Level], Made], label: Callable[[Level], str]
) -> Climbed[Level, Made]:
    """``attempt(level)`` for each level in turn until one returns; ZooError when none
    does (the first level's failure, then each other level's, cut short). ``attempt``
    raises ``Final`` for a failure no later level can mend, ``Skip`` for a level to pass over."""
    failures: list[tuple[Level, str]] = []
    for level in levels:
        try:
            made = attempt(level)
        except Skip:
            continue
        except Final as exc:
            failures.append((level, str(exc)))
            break
        except ZooError as exc:
            failures.append((level, str(exc)))
            continue
        return Climbed(level, made, failures)
    raise ZooError(failed_message(failures, label))


def failed_message(failures: Sequence[tuple[Level, str]], label: Callable[[Level], str]) -> str:
    """The first level's failure in full, then the others' (the shrink level, a short text).

    Example::

        failed_message([(0, "ValueError: a"), (1, "ValueError: b")], str)
        # 'ValueError: a [gentler shrinks failed too: 1: ValueError: b]'
    """
    if not failures:
        return "no level to try"
    first = failures[0][1]
    others = [f"{label(level)}: {short(text)}" for level, text in failures[1:]]
    return f"{first} [gentler shrinks failed too: {'; '.join(others)}]" if others else first


def short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"
