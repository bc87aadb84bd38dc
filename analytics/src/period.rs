//! Periods of whole local days in a site's timezone, and how the store's UTC
//! hours fall into them.
//!
//! Rollups are kept per UTC hour. A UTC hour belongs to the local day (and
//! local hour) in which it starts; for the few timezones whose offset is not a
//! whole number of hours (Asia/Kolkata, +05:30) a day boundary therefore falls
//! on the nearest following UTC hour.

use chrono::{DateTime, Datelike, Days, NaiveDate, TimeZone, Utc};
use chrono_tz::Tz;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Period {
    pub start: NaiveDate,
    pub end: NaiveDate,
    pub tz: Tz,
}

impl Period {
    /// `days` whole local days ending today (today's partial day included).
    pub fn last_days(days: u32, tz: Tz, now: DateTime<Utc>) -> Period {
        let end = now.with_timezone(&tz).date_naive();
        let start = end.checked_sub_days(Days::new(u64::from(days.saturating_sub(1)))).unwrap_or(end);
        Period { start, end, tz }
    }

    pub fn new(start: NaiveDate, end: NaiveDate, tz: Tz) -> Period {
        Period { start, end, tz }
    }

    /// The UTC hours `[from, to)` whose start lies inside the period.
    pub fn hour_range(&self) -> (i64, i64) {
        let from = local_midnight(self.start, self.tz).timestamp();
        let to = local_midnight(self.end.succ_opt().unwrap_or(self.end), self.tz).timestamp();
        (from.div_euclid(3600) + i64::from(from.rem_euclid(3600) != 0), to.div_euclid(3600) + i64::from(to.rem_euclid(3600) != 0))
    }

    /// Every local date of the period, in order.
    pub fn dates(&self) -> impl Iterator<Item = NaiveDate> {
        let end = self.end;
        self.start.iter_days().take_while(move |d| *d <= end)
    }

    /// The local date a UTC hour belongs to.
    pub fn date_of_hour(&self, hour: i64) -> NaiveDate {
        hour_start(hour).with_timezone(&self.tz).date_naive()
    }
}

/// The instant a UTC hour index starts at.
pub fn hour_start(hour: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(hour * 3600, 0).unwrap_or_default()
}

/// The Monday of the ISO week containing `date`.
pub fn week_monday(date: NaiveDate) -> NaiveDate {
    date.checked_sub_days(Days::new(u64::from(date.weekday().num_days_from_monday()))).unwrap_or(date)
}

/// The first instant of a local date. Where midnight does not exist (a DST gap
/// at midnight) the day starts at the first instant after the gap.
pub fn local_midnight(date: NaiveDate, tz: Tz) -> DateTime<Utc> {
    let midnight = date.and_hms_opt(0, 0, 0).unwrap_or_default();
    for minutes in (0..=180).step_by(15) {
        let t = midnight + chrono::Duration::minutes(minutes);
        if let Some(local) = tz.from_local_datetime(&t).earliest() {
            return local.with_timezone(&Utc);
        }
    }
    Utc.from_utc_datetime(&midnight)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> NaiveDate {
        s.parse().unwrap()
    }

    #[test]
    fn last_days_ends_today_in_the_site_timezone() {
        // 23:30 UTC on 20 Nov is already 21 Nov in Paris.
        let now = Utc.with_ymd_and_hms(2026, 11, 20, 23, 30, 0).unwrap();
        let p = Period::last_days(7, chrono_tz::Europe::Paris, now);
        assert_eq!((p.start, p.end), (d("2026-11-15"), d("2026-11-21")));
        let p = Period::last_days(1, Tz::UTC, now);
        assert_eq!((p.start, p.end), (d("2026-11-20"), d("2026-11-20")));
    }

    #[test]
    fn hour_range_follows_local_midnights_across_dst() {
        // Europe/Paris leaves summer time on 25 Oct 2026: that day has 25 hours.
        let p = Period::new(d("2026-10-25"), d("2026-10-25"), chrono_tz::Europe::Paris);
        let (from, to) = p.hour_range();
        assert_eq!(to - from, 25);
        assert_eq!(hour_start(from), Utc.with_ymd_and_hms(2026, 10, 24, 22, 0, 0).unwrap());
        // New York springs forward on 8 Mar 2026: 23 hours.
        let p = Period::new(d("2026-03-08"), d("2026-03-08"), chrono_tz::America::New_York);
        let (from, to) = p.hour_range();
        assert_eq!(to - from, 23);
    }

    #[test]
    fn half_hour_offsets_round_to_the_next_utc_hour() {
        let p = Period::new(d("2026-11-20"), d("2026-11-20"), chrono_tz::Asia::Kolkata);
        let (from, to) = p.hour_range();
        // Local midnight is 18:30 UTC the day before; the first whole UTC hour is 19:00.
        assert_eq!(hour_start(from), Utc.with_ymd_and_hms(2026, 11, 19, 19, 0, 0).unwrap());
        assert_eq!(to - from, 24);
        assert_eq!(p.date_of_hour(from), d("2026-11-20"));
        assert_eq!(p.date_of_hour(from - 1), d("2026-11-19"));
    }

    #[test]
    fn weeks_start_on_monday() {
        assert_eq!(week_monday(d("2026-11-22")), d("2026-11-16"));
        assert_eq!(week_monday(d("2026-11-16")), d("2026-11-16"));
        assert_eq!(week_monday(d("2027-01-01")), d("2026-12-28"));
    }

    #[test]
    fn missing_midnight_starts_the_day_after_the_gap() {
        // Santiago springs forward at local midnight (first Sunday of September 2026).
        let t = local_midnight(d("2026-09-06"), chrono_tz::America::Santiago);
        assert_eq!(t.with_timezone(&chrono_tz::America::Santiago).format("%H:%M").to_string(), "01:00");
    }
}
