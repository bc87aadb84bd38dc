//! The export's PDF: a one-look overview of a period that a publisher can
//! forward — key figures, conversions per day, devices, countries and the
//! A/B test — composed with the `pdf` document builder.

use chrono::NaiveDate;

use super::pdf::{Align, Chart, ChartKind, Document, Kpi, Table};
use super::{Selection, Summary};
use crate::model::Site;
use crate::period::week_monday;
use crate::query::Counters;
use crate::Result;

/// Countries listed one by one; the rest are summed in one row.
const TOP_COUNTRIES: usize = 15;
/// The longest period charted day by day.
const LONGEST_DAILY_CHART: usize = 92;

pub fn render_pdf(site: &Site, sel: &Selection, s: &Summary) -> Result<Vec<u8>> {
    let p = &sel.period;
    let mut doc = Document::new(site.name.clone());
    doc.subtitle(format!("Ad-blocker wall report · {}", site.domain));
    doc.subtitle(format!("{} to {} ({} days, dates in {})", p.start, p.end, p.dates().count(), p.tz.name()));
    if let Some(f) = sel.describe_filters() {
        doc.subtitle(format!("Filtered to {f}"));
    }
    doc.footer(format!("Postern · {} · {} to {}", site.domain, p.start, p.end));

    let t = &s.totals;
    doc.heading("Key figures");
    doc.kpis(vec![
        Kpi::new("Sessions", thousands(t.sessions)),
        Kpi::new("Ad blockers detected", thousands(t.adblock)).note(format!("{} of sessions", pct(t.adblock_share()))),
        Kpi::new("Walls displayed", thousands(t.walls)),
        Kpi::new("Conversions", thousands(t.conversions)),
        Kpi::new("Conversion rate", pct(t.conversion_rate())).note("conversions ÷ walls displayed"),
        Kpi::new("Walls dismissed", thousands(t.dismissed)),
    ]);

    // Days up to three months; beyond, daily bars get too thin to read, so weeks.
    let (heading, buckets) = if s.daily.len() > LONGEST_DAILY_CHART { ("Conversions per week", weekly(&s.daily)) } else {
        ("Conversions per day", s.daily.iter().map(|(d, c)| (*d, c.conversions)).collect())
    };
    doc.heading(heading);
    doc.chart(Chart {
        kind: ChartKind::Bars,
        labels: buckets.iter().map(|(d, _)| d.format("%b %-d").to_string()).collect(),
        values: buckets.iter().map(|(_, n)| *n as f64).collect(),
    });

    doc.heading("By device");
    let mut devices = breakdown("Device");
    for (d, c) in &s.devices {
        devices.row(breakdown_row(d.as_str(), c, t));
    }
    table_or_note(&mut doc, devices);

    doc.heading("By country");
    let mut countries = breakdown("Country");
    for (code, c) in s.countries.iter().take(TOP_COUNTRIES) {
        countries.row(breakdown_row(code, c, t));
    }
    if s.countries.len() > TOP_COUNTRIES {
        let mut rest = Counters::default();
        for (_, c) in &s.countries[TOP_COUNTRIES..] {
            rest.add(c);
        }
        countries.row(breakdown_row(&format!("{} other countries", s.countries.len() - TOP_COUNTRIES), &rest, t));
    }
    table_or_note(&mut doc, countries);

    doc.heading("A/B test");
    let mut ab = Table::new(&[
        ("Variant", Align::Left),
        ("Impressions", Align::Right),
        ("Conversions", Align::Right),
        ("Rate", Align::Right),
        ("Confidence", Align::Right),
        ("Winner", Align::Left),
    ]);
    for v in &s.variants {
        ab.row([
            v.name.clone(),
            thousands(v.impressions),
            thousands(v.conversions),
            pct(v.conversion_rate),
            pct(v.confidence),
            if v.is_winner == Some(true) { "winner".to_owned() } else { String::new() },
        ]);
    }
    table_or_note(&mut doc, ab);
    let winner = s.variants.iter().find(|v| v.is_winner == Some(true));
    doc.paragraph(match winner {
        Some(w) => format!("The {} wall converts best: {} with {} confidence.", w.name, pct(w.conversion_rate), pct(w.confidence)),
        None => "No variant is a winner yet: a winner needs 95% confidence and at least 100 impressions on both sides.".to_owned(),
    });

    doc.heading("How to read these numbers");
    doc.paragraph(
        "Every figure counts visitor sessions, each in the hour it started. Conversion rate is conversions ÷ walls \
         displayed × 100 (how well the wall converts); the ad-block share is ad blockers detected ÷ sessions × 100. \
         A/B confidence is 100 × (1 − p) of a two-sided two-proportion z-test against control.",
    );
    doc.render()
}

/// Conversions per ISO week, labelled by the week's Monday (the first and
/// last weeks may be partial).
fn weekly(daily: &[(NaiveDate, Counters)]) -> Vec<(NaiveDate, u64)> {
    let mut weeks: Vec<(NaiveDate, u64)> = Vec::new();
    for (d, c) in daily {
        let monday = week_monday(*d);
        match weeks.last_mut() {
            Some((m, n)) if *m == monday => *n += c.conversions,
            _ => weeks.push((monday, c.conversions)),
        }
    }
    weeks
}

fn breakdown(first: &str) -> Table {
    Table::new(&[
        (first, Align::Left),
        ("Sessions", Align::Right),
        ("Share", Align::Right),
        ("Ad blockers", Align::Right),
        ("Walls", Align::Right),
        ("Conversions", Align::Right),
        ("Rate", Align::Right),
    ])
}

fn breakdown_row(name: &str, c: &Counters, total: &Counters) -> [String; 7] {
    [
        name.to_owned(),
        thousands(c.sessions),
        pct(crate::ab::percent(c.sessions, total.sessions)),
        thousands(c.adblock),
        thousands(c.walls),
        thousands(c.conversions),
        pct(c.conversion_rate()),
    ]
}

fn table_or_note(doc: &mut Document, table: Table) {
    if table.is_empty() {
        doc.paragraph("No data in this period.");
    } else {
        doc.table(table);
    }
}

/// 12.5 → "12.50%".
fn pct(v: f64) -> String {
    format!("{v:.2}%")
}

/// 1234567 → "1,234,567".
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_periods_are_charted_by_week() {
        let day = |s: &str, n: u64| (s.parse().unwrap(), Counters { conversions: n, ..Counters::default() });
        // Saturday 21 Nov 2026 to Tuesday 24 Nov: a partial week, then the next.
        let daily = [day("2026-11-21", 1), day("2026-11-22", 2), day("2026-11-23", 4), day("2026-11-24", 8)];
        assert_eq!(weekly(&daily), vec![("2026-11-16".parse().unwrap(), 3), ("2026-11-23".parse().unwrap(), 12)]);
    }

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(super::thousands(0), "0");
        assert_eq!(super::thousands(999), "999");
        assert_eq!(super::thousands(1000), "1,000");
        assert_eq!(super::thousands(1234567), "1,234,567");
    }
}
