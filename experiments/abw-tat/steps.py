"""The order of an ABw-TAT-ABw session's steps.

Pure planning, kept apart from the I/O in ``session.py`` so the order-balancing is
unit-tested without a network.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    kind: str  # "abw", "tat" or "pause"
    half: int
    method: str = ""  # ABw tool for "abw" steps
    seconds: float = 0.0  # for "pause"
    repetition: int = 0


def session_steps(*, method1: str, method2: str, halves: int, pause_s: float,
                  repetitions: int = 1, tat: bool = True) -> list[Step]:
    """``repetitions`` times ABW1-TAT-ABW2, pause, ABW2-TAT-ABW1, with a pause between
    repetitions too: each tool runs once before and once after a TAT, so neither always
    measures a link just loaded (or just idle). With one half, every repetition is
    ABW1-TAT-ABW2. Without ``tat`` each half is ABW1-ABW2: the cheap session of a
    campaign in proxy mode, whose TAT the calibrated proxy predicts instead."""
    if repetitions < 1 or halves not in (1, 2):
        raise ValueError("a session has at least one repetition of one or two halves")
    orders = [(method1, method2), (method2, method1)][:halves]
    steps: list[Step] = []
    for rep in range(repetitions):
        for half, (first, second) in enumerate(orders):
            if steps:
                steps.append(Step("pause", half, seconds=pause_s, repetition=rep))
            steps += [Step("abw", half, first, repetition=rep),
                      *([Step("tat", half, repetition=rep)] if tat else []),
                      Step("abw", half, second, repetition=rep)]
    return steps

