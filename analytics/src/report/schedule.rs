//! When reports fire and which period each one covers. Pure functions of a
//! schedule, a timezone and an instant: no I/O, no clock.
//!
//! A schedule fires on local dates (every day, one weekday, one day of the
//! month) at a local time in the site's timezone. An occurrence is identified by
//! its local date, which is what makes a run unique per period. When the local
//! time does not exist (the spring-forward gap) the report fires at the first
//! instant after the gap; when it exists twice (fall back) it fires at the first.

use chrono::{DateTime, Datelike, Days, Months, NaiveDate, TimeZone, Utc};
use chrono_tz::Tz;

use super::config::{Filters, Frequency, ReportType, Schedule};
use crate::period::week_monday;

/// One firing of a schedule: the local date it belongs to and the instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Occurrence {
    pub date: NaiveDate,
    pub at: DateTime<Utc>,
}

impl Schedule {
    pub fn fires_on(&self, date: NaiveDate) -> bool {
        match self.frequency {
            Frequency::Daily => true,
            Frequency::Weekly(w) => date.weekday() == w,
            Frequency::Monthly(d) => date.day() == d,
        }
    }

    /// The instant the schedule fires on `date` in `tz`.
    pub fn instant_on(&self, date: NaiveDate, tz: Tz) -> DateTime<Utc> {
        let local = date.and_time(self.time);
        // A time inside a DST gap does not exist: step forward to the first that does.
        for minutes in (0..=180).step_by(15) {
            let t = local + chrono::Duration::minutes(minutes);
            if let Some(found) = tz.from_local_datetime(&t).earliest() {
                return found.with_timezone(&Utc);
            }
        }
        Utc.from_utc_datetime(&local)
    }

    /// The most recent occurrence at or before `now`.
    pub fn latest_at_or_before(&self, tz: Tz, now: DateTime<Utc>) -> Occurrence {
        let today = now.with_timezone(&tz).date_naive();
        // Every schedule fires at least once in any 32 consecutive days.
        let mut date = today.checked_add_days(Days::new(1)).unwrap_or(today);
        for _ in 0..40 {
            if self.fires_on(date) {
                let at = self.instant_on(date, tz);
                if at <= now {
                    return Occurrence { date, at };
                }
            }
            date = date.pred_opt().unwrap_or(date);
        }
        Occurrence { date: today, at: self.instant_on(today, tz) }
    }

    /// The first occurrence strictly after `now`.
    pub fn next_after(&self, tz: Tz, now: DateTime<Utc>) -> Occurrence {
        let mut date = now.with_timezone(&tz).date_naive().pred_opt().unwrap_or_default();
        for _ in 0..40 {
            if self.fires_on(date) {
                let at = self.instant_on(date, tz);
                if at > now {
                    return Occurrence { date, at };
                }
            }
            date = date.succ_opt().unwrap_or(date);
        }
        Occurrence { date, at: self.instant_on(date, tz) }
    }
}

/// The whole local days a report sent on `date` covers: the period that ended.
/// Daily: the day before. Weekly: the last complete ISO week (Monday–Sunday).
/// Monthly: the last complete calendar month. Custom: its fixed filter period,
/// else the period that ended for its frequency.
pub fn period_for(kind: ReportType, schedule: &Schedule, filters: &Filters, date: NaiveDate) -> (NaiveDate, NaiveDate) {
    if let (ReportType::Custom, Some(start), Some(end)) = (kind, filters.start, filters.end) {
        return (start, end);
    }
    let unit = match (kind, schedule.frequency) {
        (ReportType::Daily, _) | (ReportType::Custom, Frequency::Daily) => Frequency::Daily,
        (ReportType::Weekly, _) | (ReportType::Custom, Frequency::Weekly(_)) => Frequency::Weekly(chrono::Weekday::Mon),
        (ReportType::Monthly, _) | (ReportType::Custom, Frequency::Monthly(_)) => Frequency::Monthly(1),
    };
    match unit {
        Frequency::Daily => {
            let day = date.pred_opt().unwrap_or(date);
            (day, day)
        }
        Frequency::Weekly(_) => {
            let monday = week_monday(date).checked_sub_days(Days::new(7)).unwrap_or(date);
            (monday, monday.checked_add_days(Days::new(6)).unwrap_or(monday))
        }
        Frequency::Monthly(_) => {
            let first = date.with_day(1).unwrap_or(date);
            let start = first.checked_sub_months(Months::new(1)).unwrap_or(first);
            (start, first.pred_opt().unwrap_or(first))
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::{NaiveTime, Weekday};
    use chrono_tz::America::New_York;
    use chrono_tz::Europe::Paris;

    use super::*;

    fn d(s: &str) -> NaiveDate {
        s.parse().unwrap()
    }

    fn utc(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn at(frequency: Frequency, hh: u32, mm: u32) -> Schedule {
        Schedule { frequency, time: NaiveTime::from_hms_opt(hh, mm, 0).unwrap() }
    }

    #[test]
    fn eight_oclock_in_paris_follows_summer_time() {
        let daily = ReportType::Daily.default_schedule();
        // Paris leaves summer time on Sunday 25 October 2026 (03:00 CEST → 02:00 CET).
        assert_eq!(daily.instant_on(d("2026-10-24"), Paris), utc("2026-10-24T06:00:00Z"));
        assert_eq!(daily.instant_on(d("2026-10-25"), Paris), utc("2026-10-25T07:00:00Z"));
        // And enters it on Sunday 29 March 2026.
        assert_eq!(daily.instant_on(d("2026-03-28"), Paris), utc("2026-03-28T07:00:00Z"));
        assert_eq!(daily.instant_on(d("2026-03-29"), Paris), utc("2026-03-29T06:00:00Z"));
        // Just before 08:00 CET on the change day the due occurrence is still the day before.
        let o = daily.latest_at_or_before(Paris, utc("2026-10-25T06:59:59Z"));
        assert_eq!((o.date, o.at), (d("2026-10-24"), utc("2026-10-24T06:00:00Z")));
        let o = daily.latest_at_or_before(Paris, utc("2026-10-25T07:00:00Z"));
        assert_eq!(o.date, d("2026-10-25"));
        assert_eq!(daily.next_after(Paris, utc("2026-10-24T06:00:00Z")).at, utc("2026-10-25T07:00:00Z"));
    }

    #[test]
    fn eight_oclock_in_new_york_follows_daylight_time() {
        let daily = ReportType::Daily.default_schedule();
        // New York springs forward on Sunday 8 March 2026 and falls back on Sunday 1 November 2026.
        assert_eq!(daily.instant_on(d("2026-03-07"), New_York), utc("2026-03-07T13:00:00Z"));
        assert_eq!(daily.instant_on(d("2026-03-08"), New_York), utc("2026-03-08T12:00:00Z"));
        assert_eq!(daily.instant_on(d("2026-10-31"), New_York), utc("2026-10-31T12:00:00Z"));
        assert_eq!(daily.instant_on(d("2026-11-01"), New_York), utc("2026-11-01T13:00:00Z"));
        // The weekly report on the Monday after the change is at 08:00 EDT.
        let weekly = ReportType::Weekly.default_schedule();
        let o = weekly.next_after(New_York, utc("2026-03-06T00:00:00Z"));
        assert_eq!((o.date, o.at), (d("2026-03-09"), utc("2026-03-09T12:00:00Z")));
    }

    #[test]
    fn times_in_the_gap_or_the_overlap_fire_once() {
        // 02:30 does not exist in New York on 8 March 2026: it fires at 03:00 EDT.
        let s = at(Frequency::Daily, 2, 30);
        assert_eq!(s.instant_on(d("2026-03-08"), New_York), utc("2026-03-08T07:00:00Z"));
        // 01:30 happens twice on 1 November 2026: the first (EDT) counts.
        let s = at(Frequency::Daily, 1, 30);
        assert_eq!(s.instant_on(d("2026-11-01"), New_York), utc("2026-11-01T05:30:00Z"));
        // Between the two 01:30s the occurrence is the same day: no second firing.
        assert_eq!(s.latest_at_or_before(New_York, utc("2026-11-01T06:15:00Z")).date, d("2026-11-01"));
        assert_eq!(s.next_after(New_York, utc("2026-11-01T05:30:00Z")).date, d("2026-11-02"));
    }

    #[test]
    fn periods_across_the_year_boundary_use_iso_weeks() {
        let weekly = ReportType::Weekly.default_schedule();
        let f = Filters::default();
        // Monday 4 January 2027 reports ISO week 53 of 2026: Mon 28 Dec – Sun 3 Jan.
        let o = weekly.next_after(Paris, utc("2026-12-31T12:00:00Z"));
        assert_eq!(o.date, d("2027-01-04"));
        assert_eq!(period_for(ReportType::Weekly, &weekly, &f, o.date), (d("2026-12-28"), d("2027-01-03")));
        assert_eq!(d("2026-12-28").iso_week().week(), 53);
        // The monthly report of 1 January 2027 covers December 2026.
        let monthly = ReportType::Monthly.default_schedule();
        let o = monthly.next_after(Paris, utc("2026-12-15T00:00:00Z"));
        assert_eq!((o.date, o.at), (d("2027-01-01"), utc("2027-01-01T07:00:00Z")));
        assert_eq!(period_for(ReportType::Monthly, &monthly, &f, o.date), (d("2026-12-01"), d("2026-12-31")));
        // The daily report of 1 January covers 31 December.
        let daily = ReportType::Daily.default_schedule();
        assert_eq!(period_for(ReportType::Daily, &daily, &f, d("2027-01-01")), (d("2026-12-31"), d("2026-12-31")));
        // At 07:59 on New Year's Day in New York the due report is still the one of 31 December.
        let o = daily.latest_at_or_before(New_York, utc("2027-01-01T12:59:00Z"));
        assert_eq!(o.date, d("2026-12-31"));
        let o = daily.latest_at_or_before(New_York, utc("2027-01-01T13:00:00Z"));
        assert_eq!(o.date, d("2027-01-01"));
    }

    #[test]
    fn monthly_reports_cover_whole_months_of_any_length() {
        let m = ReportType::Monthly.default_schedule();
        let f = Filters::default();
        assert_eq!(period_for(ReportType::Monthly, &m, &f, d("2028-03-01")), (d("2028-02-01"), d("2028-02-29")));
        assert_eq!(period_for(ReportType::Monthly, &m, &f, d("2026-03-01")), (d("2026-02-01"), d("2026-02-28")));
        let on_the_15th = at(Frequency::Monthly(15), 8, 0);
        let o = on_the_15th.latest_at_or_before(Paris, utc("2026-11-14T12:00:00Z"));
        assert_eq!(o.date, d("2026-10-15"));
    }

    #[test]
    fn custom_reports_use_their_fixed_period_or_their_frequency() {
        let weekly_friday = at(Frequency::Weekly(Weekday::Fri), 17, 30);
        let fixed = Filters { start: Some(d("2026-10-01")), end: Some(d("2026-10-31")), ..Filters::default() };
        assert_eq!(period_for(ReportType::Custom, &weekly_friday, &fixed, d("2026-11-20")), (d("2026-10-01"), d("2026-10-31")));
        assert_eq!(
            period_for(ReportType::Custom, &weekly_friday, &Filters::default(), d("2026-11-20")),
            (d("2026-11-09"), d("2026-11-15"))
        );
        let o = weekly_friday.latest_at_or_before(Paris, utc("2026-11-21T00:00:00Z"));
        assert_eq!((o.date, o.at), (d("2026-11-20"), utc("2026-11-20T16:30:00Z")));
    }
}
