"""Warm pool hours (hangar.sessions.warmhours): the grammar, every refusal with its message, and
when a schedule is active and next changes, across days, past midnight, round the week's end and
over daylight-saving changes in New York and Berlin. Every instant is given, none is read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from hangar.errors import InvalidInput
from hangar.sessions.warmhours import WarmHours, Window, parse

NEW_YORK = ZoneInfo("America/New_York")
BERLIN = ZoneInfo("Europe/Berlin")


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
        ) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def wall(zone: ZoneInfo, year: int, month: int, day: int, hour: int, minute: int, *,
         fold: int = 0) -> datetime:
    """A wall time in ``zone``; ``fold=1`` is the second of a wall time that happens twice."""
    return datetime(year, month, day, hour, minute, tzinfo=zone, fold=fold)


def changes(hours: WarmHours, start: datetime, count: int) -> list[datetime]:
    found: list[datetime] = []
    at: datetime | None = start
    for _ in range(count):
        assert at is not None
        at = hours.next_change(at)
        assert at is not None
        found.append(at)
    return found


# --- parsing -------------------------------------------------------------------------------


def test_a_spec_of_several_windows_parses_into_their_days_times_and_one_zone() -> None:
    hours = parse("Mon-Fri 08:00-20:00; Sat 10:00-14:00 America/New_York")

    assert hours == WarmHours(
        windows=(Window(frozenset(range(5)), 8 * 60, 20 * 60), Window(frozenset({5}), 600, 840)),
        zone="America/New_York",
    )


def test_day_names_and_the_zone_match_in_any_case_and_the_zone_keeps_its_own_spelling() -> None:
    hours = parse("mon-FRI 08:00-20:00 europe/berlin")

    assert hours.windows[0].days == frozenset(range(5))
    assert hours.zone == "Europe/Berlin"


def test_a_day_range_that_passes_sunday_wraps_round_the_week() -> None:
    assert parse("Fri-Mon 09:00-10:00 UTC").windows[0].days == frozenset({4, 5, 6, 0})


def test_a_comma_list_mixes_single_days_and_ranges() -> None:
    assert parse("Mon,Wed,Fri-Sat 09:00-10:00 UTC").windows[0].days == frozenset({0, 2, 4, 5})


def test_blanks_around_commas_and_dashes_are_allowed() -> None:
    assert parse("  Mon , Wed - Thu 09:00 - 10:00 ;Sun 01:00-02:00   UTC ") == parse(
        "Mon,Wed-Thu 09:00-10:00; Sun 01:00-02:00 UTC")


def test_24_00_ends_a_window_at_midnight_and_a_whole_day_is_00_00_to_24_00() -> None:
    hours = parse("Tue 00:00-24:00 UTC")

    assert hours.windows[0] == Window(frozenset({1}), 0, 24 * 60)
    assert hours.active(utc(2026, 3, 3, 23, 59))  # a Tuesday
    assert not hours.active(utc(2026, 3, 4, 0, 0))


def test_the_canonical_spelling_reads_back_as_the_same_hours() -> None:
    hours = parse("sun,mon,tue,fri-sat 22:00-02:00; wed,thu 00:00-24:00; sun 10:00-11:00 utc")

    assert str(hours) == "Fri-Tue 22:00-02:00; Wed-Thu 00:00-24:00; Sun 10:00-11:00 UTC"
    assert parse(str(hours)) == hours


def test_a_zone_whose_name_holds_a_dash_is_read_whole_as_the_zone() -> None:
    assert parse("Mon 08:00-20:00 America/Port-au-Prince").zone == "America/Port-au-Prince"
    assert parse("Mon 08:00-20:00; Tue 09:00-10:00 etc/gmt-5").zone == "Etc/GMT-5"


@pytest.mark.parametrize(("spec", "message", "window"), [
    ("", "the warm pool hours are empty", None),
    ("   ", "the warm pool hours are empty", None),
    ("Mon 08:00-20:00", "missing time zone at the end", None),
    ("Mon 08:00-20:00 Europe/Berlin; Tue 08:00-20:00", "missing time zone at the end", None),
    ("America/New_York", "no window before the time zone 'America/New_York'", None),
    ("Mon 08:00-20:00 Mars/Olympus_Mons", "unknown time zone 'Mars/Olympus_Mons'", None),
    ("Mon 08:00-20:00 Factory", "unknown time zone 'Factory'", None),
    ("Mon 08:00-20:00 ../../etc/passwd", "unknown time zone '../../etc/passwd'", None),
    ("Mon 08:00-20:00 localtime", "unknown time zone 'localtime'", None),
    ("Mon 08:00-20:00;; Tue 08:00-20:00 UTC", "window 2 is empty", 2),
    ("Mon 08:00-20:00; UTC", "window 2 is empty", 2),
    ("Mon 08:00-20:00 UTC; Tue 08:00-09:00 UTC",
     "window 1 ('Mon 08:00-20:00 UTC') has more than its days and times", 1),
    ("Mon 08:00 10:00 UTC", "window 1 ('Mon 08:00 10:00') has more than its days and times", 1),
    ("08:00-20:00 UTC", "window 1 ('08:00-20:00') has no days", 1),
    ("Mon-Fri UTC", "window 1 ('Mon-Fri') has no times", 1),
    ("Mon-Fri; Sat 08:00-10:00 UTC", "window 1 ('Mon-Fri') has no times", 1),
    ("Mon 0800-1000 UTC", "window 1 ('Mon 0800-1000') has no times", 1),
    ("Mon Tue 08:00-20:00 UTC", "bad days 'Mon Tue' in window 1", 1),
    ("Mon-Fri 08:00-20:00; Mox 08:00-20:00 UTC", "unknown day 'Mox' in window 2", 2),
    ("Monday 08:00-20:00 UTC", "unknown day 'Monday' in window 1", 1),
    ("Mon-Frx 08:00-20:00 UTC", "unknown day 'Frx' in window 1", 1),
    ("Mon,,Tue 08:00-20:00 UTC", "empty day in 'Mon,,Tue' in window 1", 1),
    ("Mon, 08:00-20:00 UTC", "empty day in 'Mon,' in window 1", 1),
    ("Mon-Tue-Wed 08:00-20:00 UTC", "bad day range 'Mon-Tue-Wed' in window 1", 1),
    ("Mon- 08:00-20:00 UTC", "bad day range 'Mon-' in window 1", 1),
    ("Wed-Wed 08:00-20:00 UTC", "day range 'Wed-Wed' in window 1 goes from a day to itself", 1),
    ("Mon 08:00 UTC", "bad time range '08:00' in window 1", 1),
    ("Mon 08:00-10:00-12:00 UTC", "bad time range '08:00-10:00-12:00' in window 1", 1),
    ("Mon 8:00-20:00 UTC", "bad time '8:00' in window 1", 1),
    ("Mon 08:00-25:00 UTC", "bad time '25:00' in window 1", 1),
    ("Mon 08:60-20:00 UTC", "bad time '08:60' in window 1", 1),
    ("Mon 08:00-24:30 UTC", "bad time '24:30' in window 1", 1),
    ("Mon 08:00-20h00 UTC", "bad time '20h00' in window 1", 1),
    ("Mon 08:00-٢٠:00 UTC", "bad time '٢٠:00' in window 1", 1),
    ("Mon 24:00-02:00 UTC", "window 1 starts at 24:00", 1),
    ("Sat 10:00-10:00 UTC", "window 1 starts where it ends (10:00-10:00)", 1),
    ("Sat 00:00-00:00 UTC", "window 1 starts where it ends (00:00-00:00)", 1),
    ("Mon 08:00-20:00;" * 100 + " UTC", "more than 1000", None),
])
def test_a_bad_spec_is_invalid_input_naming_the_field_what_was_wrong_and_where(
    spec: str, message: str, window: int | None,
) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse(spec)

    assert caught.value.code == "invalid_input"
    assert message in caught.value.message
    assert caught.value.data["field"] == "warm_pool_hours"
    assert caught.value.data.get("window") == window


# --- active and next_change ----------------------------------------------------------------


def test_a_window_is_active_from_its_start_up_to_but_not_at_its_end() -> None:
    hours = parse("Wed 09:00-17:00 UTC")

    assert not hours.active(utc(2026, 3, 4, 8, 59, 59))  # a Wednesday
    assert hours.active(utc(2026, 3, 4, 9, 0))
    assert hours.active(utc(2026, 3, 4, 16, 59, 59))
    assert not hours.active(utc(2026, 3, 4, 17, 0))
    assert not hours.active(utc(2026, 3, 5, 12, 0))  # Thursday


def test_the_zone_of_the_instant_asked_about_does_not_matter_only_the_instant() -> None:
    hours = parse("Wed 09:00-17:00 America/New_York")
    instant = wall(NEW_YORK, 2026, 3, 4, 9, 30)

    assert hours.active(instant)
    assert hours.active(instant.astimezone(BERLIN))
    assert hours.active(instant.astimezone(UTC))
    assert not hours.active(utc(2026, 3, 4, 9, 30))  # 04:30 in New York


def test_next_change_walks_the_boundaries_of_the_week_in_order_in_utc() -> None:
    hours = parse("Mon-Fri 08:00-20:00; Sat 10:00-14:00 America/New_York")

    found = changes(hours, utc(2026, 3, 13, 12, 0), 5)  # Friday 08:00 in New York (EDT)

    assert found == [
        utc(2026, 3, 14, 0, 0),   # Friday 20:00
        utc(2026, 3, 14, 14, 0),  # Saturday 10:00
        utc(2026, 3, 14, 18, 0),  # Saturday 14:00
        utc(2026, 3, 16, 12, 0),  # Monday 08:00
        utc(2026, 3, 17, 0, 0),   # Monday 20:00
    ]
    assert all(b.tzinfo is UTC for b in found)
    assert [hours.active(b) for b in found] == [False, True, False, True, False]


def test_next_change_is_strictly_after_the_instant_given() -> None:
    hours = parse("Wed 09:00-17:00 UTC")

    assert hours.next_change(utc(2026, 3, 4, 9, 0)) == utc(2026, 3, 4, 17, 0)
    assert hours.next_change(utc(2026, 3, 4, 17, 0)) == utc(2026, 3, 11, 9, 0)


def test_a_window_past_midnight_belongs_to_the_day_it_starts() -> None:
    hours = parse("Fri 22:00-02:00 UTC")

    assert hours.active(utc(2026, 3, 7, 1, 0))  # Saturday 01:00: Friday's night
    assert not hours.active(utc(2026, 3, 6, 1, 0))  # Friday 01:00: Thursday's night is not in
    assert hours.next_change(utc(2026, 3, 6, 12, 0)) == utc(2026, 3, 6, 22, 0)
    assert hours.next_change(utc(2026, 3, 6, 22, 0)) == utc(2026, 3, 7, 2, 0)


def test_a_range_of_nights_starts_on_its_first_day_and_ends_the_morning_after_its_last() -> None:
    hours = parse("Mon-Fri 22:00-02:00 UTC")

    assert not hours.active(utc(2026, 3, 2, 1, 0))  # Monday morning: Sunday's night
    assert hours.active(utc(2026, 3, 3, 1, 0))  # Tuesday morning: Monday's night
    assert hours.active(utc(2026, 3, 7, 1, 0))  # Saturday morning: Friday's night
    assert not hours.active(utc(2026, 3, 7, 23, 0))  # Saturday night


def test_a_sunday_night_window_runs_into_monday_across_the_end_of_the_week() -> None:
    hours = parse("Sun 22:00-02:00 UTC")

    assert hours.active(utc(2026, 3, 2, 1, 0))  # Monday 01:00
    assert hours.next_change(utc(2026, 3, 1, 23, 0)) == utc(2026, 3, 2, 2, 0)
    assert hours.next_change(utc(2026, 3, 2, 2, 0)) == utc(2026, 3, 8, 22, 0)


def test_a_wrapping_day_range_is_active_on_the_weekend_and_off_midweek() -> None:
    hours = parse("Fri-Mon 09:00-17:00 UTC")

    active_days = [hours.active(utc(2026, 3, 2 + i, 12, 0)) for i in range(7)]  # Mon to Sun

    assert active_days == [True, False, False, False, True, True, True]
    assert hours.next_change(utc(2026, 3, 2, 17, 0)) == utc(2026, 3, 6, 9, 0)  # Mon to Fri


def test_touching_or_overlapping_windows_are_one_stretch_without_a_change_between() -> None:
    hours = parse("Mon 08:00-12:00; Mon 12:00-14:00; Mon 13:00-24:00; Tue 00:00-02:00 UTC")

    assert changes(hours, utc(2026, 3, 2, 7, 0), 2) == [
        utc(2026, 3, 2, 8, 0), utc(2026, 3, 3, 2, 0)]


def test_hours_that_cover_the_whole_week_are_always_active_and_never_change() -> None:
    hours = parse("Fri-Mon 00:00-24:00; Tue-Thu 00:00-24:00 America/New_York")

    assert hours.active(wall(NEW_YORK, 2026, 3, 8, 3, 0))
    assert hours.next_change(utc(2026, 3, 5, 0, 0)) is None
    assert hours.next_change(utc(2026, 10, 30, 0, 0)) is None


def test_a_naive_datetime_is_refused_since_it_names_no_instant() -> None:
    hours = parse("Mon 08:00-20:00 UTC")

    with pytest.raises(ValueError, match="naive"):
        hours.active(datetime(2026, 3, 2, 9, 0))
    with pytest.raises(ValueError, match="naive"):
        hours.next_change(datetime(2026, 3, 2, 9, 0))


# --- daylight saving: New York springs forward on 2026-03-08 at 02:00 and falls back on
# --- 2026-11-01 at 02:00; Berlin springs on 2026-03-29 at 02:00 and falls back on 2026-10-25 at
# --- 03:00.


def test_in_new_york_a_start_in_the_spring_gap_happens_at_the_first_instant_after_it() -> None:
    hours = parse("Sun 02:30-04:00 America/New_York")

    start = hours.next_change(utc(2026, 3, 8, 0, 0))

    assert start == wall(NEW_YORK, 2026, 3, 8, 3, 0) == utc(2026, 3, 8, 7, 0)  # 03:00 EDT
    assert hours.next_change(start) == utc(2026, 3, 8, 8, 0)  # 04:00 EDT
    assert not hours.active(utc(2026, 3, 8, 6, 59, 59))  # 01:59:59 EST


def test_in_new_york_an_end_in_the_spring_gap_happens_at_the_first_instant_after_it() -> None:
    hours = parse("Sun 01:00-02:30 America/New_York")

    assert changes(hours, utc(2026, 3, 8, 0, 0), 2) == [
        utc(2026, 3, 8, 6, 0),  # 01:00 EST
        utc(2026, 3, 8, 7, 0),  # 03:00 EDT, the gap's end
    ]
    assert hours.active(utc(2026, 3, 8, 6, 59, 59))


def test_a_window_wholly_inside_the_spring_gap_does_not_happen_that_day() -> None:
    hours = parse("Sun 02:10-02:50 America/New_York")

    assert hours.next_change(utc(2026, 3, 7, 0, 0)) == wall(NEW_YORK, 2026, 3, 15, 2, 10)
    assert not any(hours.active(utc(2026, 3, 8, 6, 0) + timedelta(minutes=m))
                   for m in range(0, 120, 5))


def test_in_new_york_a_night_across_spring_forward_is_an_hour_shorter() -> None:
    hours = parse("Sat 22:00-06:00 America/New_York")

    start, end = changes(hours, utc(2026, 3, 7, 12, 0), 2)

    assert start == utc(2026, 3, 8, 3, 0)  # Saturday 22:00 EST
    assert end == utc(2026, 3, 8, 10, 0)  # Sunday 06:00 EDT
    assert end - start == timedelta(hours=7)


def test_in_new_york_a_start_in_the_repeated_autumn_hour_happens_at_its_first_occurrence() -> None:
    hours = parse("Sun 01:30-03:00 America/New_York")

    assert changes(hours, utc(2026, 11, 1, 0, 0), 2) == [
        utc(2026, 11, 1, 5, 30),  # 01:30 EDT, the first 01:30
        utc(2026, 11, 1, 8, 0),  # 03:00 EST
    ]
    assert hours.active(wall(NEW_YORK, 2026, 11, 1, 1, 15, fold=1))  # the second 01:15 (EST)


def test_in_new_york_an_end_in_the_repeated_autumn_hour_happens_at_its_first_occurrence() -> None:
    hours = parse("Sun 00:00-01:30 America/New_York")

    end = hours.next_change(utc(2026, 11, 1, 4, 30))  # 00:30 EDT

    assert end == wall(NEW_YORK, 2026, 11, 1, 1, 30).astimezone(UTC) == utc(2026, 11, 1, 5, 30)
    assert not hours.active(wall(NEW_YORK, 2026, 11, 1, 1, 15, fold=1))  # the second 01:15
    assert hours.next_change(end) == wall(NEW_YORK, 2026, 11, 8, 0, 0)


def test_in_berlin_a_day_across_spring_forward_ends_at_the_gap_and_lasts_an_hour_less() -> None:
    hours = parse("Sun 00:00-02:30; Sun 03:00-24:00 Europe/Berlin")

    start, end = changes(hours, utc(2026, 3, 28, 12, 0), 2)

    # 02:30 does not exist that night: the first window ends at 03:00 CEST, where the next starts
    assert start == wall(BERLIN, 2026, 3, 29, 0, 0) == utc(2026, 3, 28, 23, 0)
    assert end == wall(BERLIN, 2026, 3, 30, 0, 0) == utc(2026, 3, 29, 22, 0)
    assert end - start == timedelta(hours=23)


def test_in_berlin_a_window_inside_the_spring_gap_waits_for_the_next_week() -> None:
    hours = parse("Sun 02:15-02:45 Europe/Berlin")

    assert hours.next_change(utc(2026, 3, 28, 0, 0)) == utc(2026, 4, 5, 0, 15)  # 02:15 CEST


def test_in_berlin_a_window_in_the_repeated_autumn_hour_happens_once_at_its_first_occurrence(
) -> None:
    hours = parse("Sun 02:15-02:45 Europe/Berlin")

    assert changes(hours, utc(2026, 10, 24, 0, 0), 2) == [
        utc(2026, 10, 25, 0, 15),  # 02:15 CEST
        utc(2026, 10, 25, 0, 45),  # 02:45 CEST
    ]
    assert not hours.active(wall(BERLIN, 2026, 10, 25, 2, 30, fold=1))  # 02:30 CET, the second


def test_in_berlin_a_night_across_fall_back_is_an_hour_longer() -> None:
    hours = parse("Sat 20:00-08:00 Europe/Berlin")

    start, end = changes(hours, utc(2026, 10, 24, 12, 0), 2)

    assert start == utc(2026, 10, 24, 18, 0)  # Saturday 20:00 CEST
    assert end == utc(2026, 10, 25, 7, 0)  # Sunday 08:00 CET
    assert end - start == timedelta(hours=13)


@pytest.mark.parametrize("spec", [
    "Mon-Fri 08:00-20:00; Sat 10:00-14:00 America/New_York",
    "Sat-Sun 22:00-02:30; Sun 01:30-03:00; Sun 02:10-02:20 America/New_York",
    "Sun 00:00-02:30; Sun 03:00-24:00; Sat 23:00-02:15 Europe/Berlin",
])
@pytest.mark.parametrize("week_start", [
    utc(2026, 3, 5), utc(2026, 3, 26), utc(2026, 10, 22), utc(2026, 10, 29),
])
def test_active_changes_exactly_at_the_instants_next_change_gives_over_a_clock_change_week(
    spec: str, week_start: datetime,
) -> None:
    hours = parse(spec)
    step = timedelta(minutes=5)
    at = week_start
    boundary = hours.next_change(at)
    while at < week_start + timedelta(days=7):
        assert boundary is not None and boundary > at
        following = min(boundary, at + step)
        if following == boundary:
            assert hours.active(boundary) != hours.active(boundary - timedelta(microseconds=1))
            boundary = hours.next_change(boundary)
        else:
            assert hours.active(following) == hours.active(at)
        at = following
