"""Warm pool hours: the ``warm_pool_hours`` grammar and its arithmetic, with no I/O of its own.

A spec is one or more windows separated by ``;``, each ``DAYS HH:MM-HH:MM``, then one IANA time
zone for all of them::

    Mon-Fri 08:00-20:00; Sat 10:00-14:00 America/New_York

- DAYS is a day (``Mon``), a range (``Mon-Fri``; one that passes Sunday wraps: ``Fri-Mon`` is
  Friday to Monday) or a comma list of those (``Mon,Wed,Fri-Sat``): three-letter English names,
  in any case. Blanks around ``,`` and ``-`` are allowed. A range from a day to itself is refused
  (one day or the whole week? write ``Mon`` or ``Mon-Sun``).
- Times are ``HH:MM`` on a 24-hour clock; ``24:00`` may end a window, never start one. A window
  whose end is before its start runs past midnight and belongs to the day it starts
  (``Fri 22:00-02:00`` is Friday night into Saturday). A window that starts where it ends is
  refused (``00:00-24:00`` is a whole day).
- The zone is an IANA name (``Europe/Berlin``, ``UTC``), matched in any case and kept in its own
  spelling. Zone data comes from :mod:`zoneinfo`: the system's files, else the ``tzdata``
  package, a dependency so that it works where the system has none.

Windows are wall-clock times in the zone, so daylight-saving changes follow zoneinfo:

- a boundary at a wall time that does not exist (clocks spring forward over it) happens at the
  first instant after the gap (``02:30`` in New York on the day it springs is 03:00 EDT); a
  window wholly inside a gap does not happen that day;
- a boundary at a wall time that happens twice (clocks fall back) happens at its first
  occurrence (``01:30`` in New York on the day it falls back is 01:30 EDT), so a window ending
  then does not come back for the repeated half hour.

Windows that overlap or touch (one ending as the next starts) are one stretch: no change
happens between them. A bad spec raises :class:`~hangar.errors.InvalidInput` with
``field="warm_pool_hours"``, a message naming what was wrong and where (the window's number,
from 1), and ``window`` in its data when the fault is in one window.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from importlib import resources
from typing import NoReturn
from zoneinfo import ZoneInfo

from hangar.errors import InvalidInput

FIELD = "warm_pool_hours"
MAX_SPEC_CHARS = 1000
DAY_NAMES = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_DAY_INDEX = {name.lower(): i for i, name in enumerate(DAY_NAMES)}
_MINUTES_PER_DAY = 24 * 60
_TIME = re.compile(r"([0-9]{2}):([0-9]{2})")
_AROUND_SEPARATOR = re.compile(r"\s*([,-])\s*")
_SHAPE = "expected DAYS HH:MM-HH:MM, e.g. Mon-Fri 08:00-20:00"
_HORIZON_DAYS = 16
"""How far next_change looks: every weekday twice, so a window lost to one day's clock change
is found the next week."""


@dataclass(frozen=True, slots=True)
class Window:
    """One window: the weekdays it starts on (0 is Monday), and its start and end in minutes
    after midnight; ``end <= start`` means it ends on the next day."""

    days: frozenset[int]
    start: int
    end: int

    def __str__(self) -> str:
        return f"{_days_text(self.days)} {_clock(self.start)}-{_clock(self.end)}"


@dataclass(frozen=True, slots=True)
class WarmHours:
    """A parsed spec (build it with :func:`parse`): windows of wall-clock time in ``zone``.

    ``str()`` gives the spec in a canonical spelling that parses to an equal value.
    """

    windows: tuple[Window, ...]
    zone: str

    def __str__(self) -> str:
        return "; ".join(str(w) for w in self.windows) + f" {self.zone}"

    def active(self, at: datetime) -> bool:
        """Whether the instant ``at`` (an aware datetime, in any zone) is inside a window.

        Windows are half open: active at a window's start, no longer at its end. Raises
        ValueError for a naive datetime (whose instant is unknown).
        """
        _require_aware(at)
        at = at.astimezone(UTC)  # an ambiguous wall time never compares equal across zones
        day = at.astimezone(ZoneInfo(self.zone)).date()
        # a window starting two days back ends before ``day`` (on its next day at the latest)
        return any(s <= at < e for s, e in self._stretches(day - timedelta(days=2), day))

    def next_change(self, after: datetime) -> datetime | None:
        """The first instant strictly after ``after`` (aware) at which :meth:`active`'s answer
        changes, as an aware UTC datetime; None when it never changes (windows that cover the
        whole week). At the instant returned, ``active`` already gives the new answer.

        Boundaries at wall times that do not exist or happen twice follow the rules in the
        module's docstring. Raises ValueError for a naive datetime.
        """
        _require_aware(after)
        after = after.astimezone(UTC)
        day = after.astimezone(ZoneInfo(self.zone)).date()
        last = day + timedelta(days=_HORIZON_DAYS)
        # windows starting on or after ``last`` start at or after ``limit``, so an end before it
        # is not joined by one we did not look at
        limit = _instant(datetime.combine(last, time()), ZoneInfo(self.zone))
        found = [
            b for s, e in self._stretches(day - timedelta(days=2), last - timedelta(days=1))
            for b in (s, e) if after < b < limit
        ]
        return min(found, default=None)

    def _stretches(self, first: date, last: date) -> list[tuple[datetime, datetime]]:
        """The UTC spans of the windows starting from ``first`` to ``last`` (both included),
        empty ones (lost to a clock change) left out, overlapping or touching ones joined."""
        zone = ZoneInfo(self.zone)
        spans: list[tuple[datetime, datetime]] = []
        day = first
        while day <= last:
            midnight = datetime.combine(day, time())
            for w in self.windows:
                if day.weekday() not in w.days:
                    continue
                end_day = 0 if w.end > w.start else 1
                s = _instant(midnight + timedelta(minutes=w.start), zone)
                e = _instant(midnight + timedelta(days=end_day, minutes=w.end), zone)
                if e > s:
                    spans.append((s, e))
            day += timedelta(days=1)
        spans.sort()
        joined: list[tuple[datetime, datetime]] = []
        for s, e in spans:
            if joined and s <= joined[-1][1]:
                joined[-1] = (joined[-1][0], max(e, joined[-1][1]))
            else:
                joined.append((s, e))
        return joined


def parse(spec: str) -> WarmHours:
    """Parse a ``warm_pool_hours`` spec (grammar in the module's docstring).

    Raises InvalidInput (``field="warm_pool_hours"``) naming what was wrong and, for a fault in
    a window, which one (counted from 1, also in the ``window`` data field).
    """
    if len(spec) > MAX_SPEC_CHARS:
        _fail(f"the warm pool hours are {len(spec)} characters long, more than {MAX_SPEC_CHARS}")
    parts = spec.rsplit(None, 1)
    if not parts:
        _fail(f"the warm pool hours are empty; {_SHAPE}, then a time zone")
    zone = parts[-1]
    if ":" in zone:
        _fail("missing time zone at the end of the warm pool hours "
              "(one IANA name for all windows, e.g. Europe/Berlin)")
    if len(parts) == 1:
        _fail(f"no window before the time zone {zone!r}; {_SHAPE}")
    texts = parts[0].split(";")
    windows = tuple(_window(text, n) for n, text in enumerate(texts, start=1))
    return WarmHours(windows=windows, zone=_zone_name(zone))


def _window(text: str, n: int) -> Window:
    text = text.strip()
    tokens = text.split()
    if not tokens:
        _fail(f"window {n} is empty; {_SHAPE}", n)
    # days never hold a colon and times always do: the times start at the first colon
    cut = next((i for i, token in enumerate(tokens) if ":" in token), len(tokens))
    days_text, times = (_tight(" ".join(part)) for part in (tokens[:cut], tokens[cut:]))
    if not days_text or not times:
        _fail(f"window {n} ({text!r}) has no {'days' if times else 'times'}; {_SHAPE}", n)
    if " " in days_text:
        _fail(f"bad days {days_text!r} in window {n} "
              "(a day, a range or a comma list, e.g. Mon,Wed-Fri)", n)
    if " " in times:
        _fail(f"window {n} ({text!r}) has more than its days and times; {_SHAPE} "
              "(one time zone for all windows, at the end)", n)
    if times.count("-") != 1:
        _fail(f"bad time range {times!r} in window {n}; expected HH:MM-HH:MM", n)
    start_text, end_text = times.split("-")
    start = _minutes(start_text, n)
    end = _minutes(end_text, n)
    if start == _MINUTES_PER_DAY:
        _fail(f"window {n} starts at 24:00; start it at 00:00 of the next day", n)
    if start == end:
        _fail(f"window {n} starts where it ends ({start_text}-{end_text}); "
              "a whole day is 00:00-24:00", n)
    return Window(days=_days(days_text, n), start=start, end=end)


def _days(text: str, n: int) -> frozenset[int]:
    days: set[int] = set()
    for item in text.split(","):
        if not item:
            _fail(f"empty day in {text!r} in window {n}", n)
        ends = item.split("-")
        if len(ends) > 2 or not all(ends):
            _fail(f"bad day range {item!r} in window {n}; expected a day or DAY-DAY", n)
        first, last = (_day(name, n) for name in (ends[0], ends[-1]))
        if len(ends) == 2 and first == last:
            _fail(f"day range {item!r} in window {n} goes from a day to itself; "
                  f"write {DAY_NAMES[first]} for one day or Mon-Sun for every day", n)
        days.update((first + i) % 7 for i in range((last - first) % 7 + 1))
    return frozenset(days)


def _tight(text: str) -> str:
    """``text`` without the blanks around its commas and dashes."""
    return _AROUND_SEPARATOR.sub(r"\1", text)


def _day(name: str, n: int) -> int:
    index = _DAY_INDEX.get(name.lower())
    if index is None:
        _fail(f"unknown day {name!r} in window {n} (days are {', '.join(DAY_NAMES)})", n)
    return index


def _minutes(text: str, n: int) -> int:
    match = _TIME.fullmatch(text)
    hours, minutes = (int(match[1]), int(match[2])) if match else (99, 99)
    if minutes > 59 or hours > 24 or (hours == 24 and minutes):
        _fail(f"bad time {text!r} in window {n} (HH:MM from 00:00 to 23:59, or 24:00 as an end)",
              n)
    return hours * 60 + minutes


def _zone_name(name: str) -> str:
    key = _zone_names().get(name.lower())
    if key is None:
        _fail(f"unknown time zone {name!r} (an IANA name, e.g. Europe/Berlin or UTC)")
    return key


@lru_cache(maxsize=1)
def _zone_names() -> dict[str, str]:
    """The IANA zone names, by their lowercase spelling: the tzdata package's list, the same on
    every machine (the system's folder may hold other files, ``localtime`` say); the package
    documents its ``zones`` file as the list of its keys."""
    text = resources.files("tzdata").joinpath("zones").read_text(encoding="utf-8")
    return {key.lower(): key for key in text.split() if key != "Factory"}


def _instant(wall: datetime, zone: ZoneInfo) -> datetime:
    """The UTC instant of the naive wall time ``wall`` in ``zone``: its first occurrence if it
    happens twice, the first instant after the gap if it does not exist."""
    first = wall.replace(tzinfo=zone).astimezone(UTC)
    if first.astimezone(zone).replace(tzinfo=None) == wall:
        return first  # fold=0 is the earlier of two occurrences
    # In a gap, fold=0 reads the wall time with the offset from before the gap (an instant past
    # its end) and fold=1 with the one after (an instant before it): the gap ends between them.
    before = int(wall.replace(tzinfo=zone, fold=1).timestamp())
    past = int(first.timestamp())
    while past - before > 1:
        mid = (before + past) // 2
        if datetime.fromtimestamp(mid, zone).replace(tzinfo=None) > wall:
            past = mid
        else:
            before = mid
    return datetime.fromtimestamp(past, UTC)


def _require_aware(at: datetime) -> None:
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError(f"a naive datetime ({at.isoformat()}) names no instant")


def _clock(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _days_text(days: frozenset[int]) -> str:
    runs: list[list[int]] = []
    for d in sorted(days):
        if runs and runs[-1][-1] == d - 1:
            runs[-1].append(d)
        else:
            runs.append([d])
    if len(runs) > 1 and runs[0][0] == 0 and runs[-1][-1] == 6:
        runs[0] = runs.pop() + runs[0]  # a run through Sunday into Monday: Fri-Tue
    return ",".join(DAY_NAMES[r[0]] + (f"-{DAY_NAMES[r[-1]]}" if len(r) > 1 else "")
                    for r in runs)


def _fail(message: str, window: int | None = None) -> NoReturn:
    data: dict[str, object] = {"field": FIELD}
    if window is not None:
        data["window"] = window
    raise InvalidInput(message, **data)
