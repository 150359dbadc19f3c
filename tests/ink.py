"""Figure 3a's published crossings written out by hand, and every pairing of our drop steps with them that the image's
ink allows, scored by brute force: a second route to fig03a's pairing (it never calls ``published.rules``).

Seed 0 is drawn twice, so its crossing carries double ink: at drop 3 the one double-ink crossing, at drops 2 and 4 one
of two, the other then holding two seeds (one line each). Drop 1 does not tie seed 0.
"""

from __future__ import annotations

import itertools
import math

LAST = 9966  # the published window's last step: a curve beyond it is still on M_3 there

# drop → (the steps seed 0's double-ink crossing may be at, or None; the other crossings as (low, high))
IMAGE = {1: (None, [(370, 514)] * 5 + [(563, 563)]),
         2: ((705, 804), [(557, 557), (601, 601), (1098, 1098)]),
         3: ((1250,), [(997, 997), (1069, 1069), (1608, 1608), (1718, 1718), (1856, 1856)]),
         4: ((4936, 5729), [(3601, 3601), (6521, 6521), (LAST, math.inf)])}


def signed(x: float, low: float, high: float) -> float:
    """Ours − the crossing [low, high] (0 inside); a drop that never comes is 0 from the crossing beyond the window
    and NaN from any other."""
    if not math.isfinite(x):
        return 0.0 if high == math.inf else math.nan
    return 0.0 if low <= x <= high else (x - low if x < low else x - high)


def _distance(x: float, low: float, high: float) -> float:
    d = signed(x, low, high)
    return math.inf if math.isnan(d) else abs(d)


def pairings(ours: dict, drop: int) -> list[tuple]:
    """Every assignment of ``ours`` (seed → step) to drop ``drop``'s crossings that fills each crossing with as many
    curves as its ink holds, as ``(total distance, {seed: (low, high)})``."""
    own, singles = IMAGE[drop]
    out = []
    for at in own or (None,):
        tied = {} if at is None else {0: (at, at)}
        crossings = singles + [(o, o) for o in (own or ()) if o != at] * 2
        free = [s for s in ours if s not in tied]
        for order in itertools.permutations(crossings):
            where = {**tied, **dict(zip(free, order))}
            out.append((sum(_distance(ours[s], *where[s]) for s in ours), where))
    return out


def smallest_total(ours: dict, drop: int) -> list[dict]:
    """The signed differences (seed → ours − its crossing) of the ink-consistent assignments whose total distance is
    the smallest, each once (more than one only where different assignments tie)."""
    scored = pairings(ours, drop)
    least = min(total for total, _ in scored)
    out = []
    for total, where in scored:
        differences = {s: signed(ours[s], *where[s]) for s in ours}
        if total == least and differences not in out:
            out.append(differences)
    return out
