//! A stored report run as people read it: the same blocks rendered as an HTML
//! document (e-mail body, `format=html`), as plain text (the e-mail's
//! alternative part and the chat message), as a PDF (with the document builder
//! every Postern PDF uses) and as CSV (the per-day figures).

use analytics::export::pdf::{self, Align, Chart, ChartKind, Document, Kpi};
use analytics::report::content::{Breakdown, Change, DayRow, Kpis};
use analytics::report::{Content, RunDocument};
use chrono::{Datelike, NaiveDate};

use crate::html;

/// One block of a report.
enum Block {
    /// Labelled figures.
    Figures { title: String, items: Vec<(String, String)> },
    /// A table with a header row.
    Table { title: String, head: Vec<String>, rows: Vec<Vec<String>> },
    /// Sentences (recommendations, notes).
    Notes { title: String, lines: Vec<String> },
}

fn int(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn pct(x: f64) -> String {
    format!("{x:.2}%")
}

fn points(x: f64) -> String {
    format!("{x:+.2} points")
}

fn change(c: &Change) -> String {
    match c.percent {
        Some(p) => format!("{:+.2}% vs {}", p, int(c.previous)),
        None => format!("{:+} vs {}", c.difference, int(c.previous)),
    }
}

fn day(d: NaiveDate) -> String {
    d.format("%a %Y-%m-%d").to_string()
}

/// The period as a title fragment: one day, a week, a month or a range.
pub fn period_label(doc: &RunDocument) -> String {
    let (s, e) = (doc.period.start, doc.period.end);
    if s == e {
        s.format("%A %-d %B %Y").to_string()
    } else if s.day() == 1 && e.succ_opt().is_some_and(|n| n.day() == 1) && s.month() == e.month() {
        s.format("%B %Y").to_string()
    } else if s.weekday() == chrono::Weekday::Mon && (e - s).num_days() == 6 {
        format!("week {} ({s} to {e})", s.iso_week().week())
    } else {
        format!("{s} to {e}")
    }
}

pub fn subject(doc: &RunDocument) -> String {
    format!("{}: {} for {}", doc.site.name, doc.report_name, period_label(doc))
}

fn kpi_items(k: &Kpis) -> Vec<(String, String)> {
    vec![
        ("Sessions".into(), int(k.sessions)),
        ("Ad-blocker sessions".into(), format!("{} ({} of sessions)", int(k.adblock_detected), pct(k.adblock_share))),
        ("Walls displayed".into(), int(k.walls_displayed)),
        ("Conversions".into(), format!("{} ({} of walls)", int(k.conversions), pct(k.conversion_rate))),
    ]
}

fn day_table(title: &str, days: &[DayRow]) -> Block {
    Block::Table {
        title: title.into(),
        head: ["Day", "Sessions", "Ad blockers", "Walls", "Conversions", "Rate"].map(String::from).to_vec(),
        rows: days
            .iter()
            .map(|d| {
                vec![
                    day(d.date),
                    int(d.kpis.sessions),
                    int(d.kpis.adblock_detected),
                    int(d.kpis.walls_displayed),
                    int(d.kpis.conversions),
                    pct(d.kpis.conversion_rate),
                ]
            })
            .collect(),
    }
}

fn breakdown_table(title: &str, key: &str, rows: &[Breakdown]) -> Block {
    Block::Table {
        title: title.into(),
        head: [key, "Sessions", "Ad blockers", "Walls", "Conversions", "Rate"].map(String::from).to_vec(),
        rows: rows
            .iter()
            .map(|b| {
                vec![
                    b.key.clone(),
                    int(b.kpis.sessions),
                    int(b.kpis.adblock_detected),
                    int(b.kpis.walls_displayed),
                    int(b.kpis.conversions),
                    pct(b.kpis.conversion_rate),
                ]
            })
            .collect(),
    }
}

fn blocks(doc: &RunDocument) -> Vec<Block> {
    match &doc.content {
        Content::Daily(d) => {
            let mut items = kpi_items(&d.kpis);
            items[0].1 = format!("{} ({} the day before)", int(d.kpis.sessions), change(&d.sessions_change));
            items.push((
                "Top event".into(),
                d.top_event.as_ref().map_or("none".into(), |t| format!("{} ({})", t.event_type, int(t.count))),
            ));
            items.push((
                "Top device".into(),
                d.top_device.as_ref().map_or("none".into(), |t| format!("{} ({} of sessions)", t.device, pct(t.share))),
            ));
            vec![Block::Figures { title: "Summary".into(), items }]
        }
        Content::Weekly(w) => {
            let mut items = kpi_items(&w.kpis);
            items.push((
                "Conversion rate change".into(),
                format!("{} vs the previous week ({})", points(w.conversion_rate_change_points), pct(w.previous_week.kpis.conversion_rate)),
            ));
            let ranked = |d: &Option<DayRow>| d.as_ref().map_or("no wall displayed".into(), |d| format!("{} ({})", day(d.date), pct(d.kpis.conversion_rate)));
            items.push(("Best day".into(), ranked(&w.best_day)));
            items.push(("Worst day".into(), ranked(&w.worst_day)));
            items.push((
                "A/B winner".into(),
                w.ab_winner.as_ref().map_or("no variant has won yet".into(), |v| {
                    format!("{} ({} conversion rate, {} confidence)", v.name, pct(v.conversion_rate), pct(v.confidence))
                }),
            ));
            vec![Block::Figures { title: "Totals".into(), items }, day_table("Day by day", &w.days)]
        }
        Content::Monthly(m) => {
            let mut out = vec![Block::Figures { title: "Key figures".into(), items: kpi_items(&m.kpis) }];
            out.push(Block::Table {
                title: "Weekly evolution".into(),
                head: ["Week", "Days", "Sessions", "Ad blockers", "Walls", "Conversions", "Rate"].map(String::from).to_vec(),
                rows: m
                    .weeks
                    .iter()
                    .map(|w| {
                        vec![
                            w.week.clone(),
                            format!("{} to {}", w.start.format("%d %b"), w.end.format("%d %b")),
                            int(w.kpis.sessions),
                            int(w.kpis.adblock_detected),
                            int(w.kpis.walls_displayed),
                            int(w.kpis.conversions),
                            pct(w.kpis.conversion_rate),
                        ]
                    })
                    .collect(),
            });
            let c = &m.comparison;
            out.push(Block::Figures {
                title: format!("Compared with {}", m.previous_month.start.format("%B %Y")),
                items: vec![
                    ("Sessions".into(), change(&c.sessions)),
                    ("Ad-blocker sessions".into(), change(&c.adblock_detected)),
                    ("Ad-blocker share".into(), points(c.adblock_share_change_points)),
                    ("Conversions".into(), change(&c.conversions)),
                    ("Conversion rate".into(), points(c.conversion_rate_change_points)),
                ],
            });
            let r = &m.revenue;
            let revenue = if r.configured {
                vec![format!("Estimated recovered revenue: {:.2}", r.estimated_recovered_revenue), format!("How: {}.", r.note)]
            } else {
                vec![format!("Not estimated: {}.", r.note)]
            };
            out.push(Block::Notes { title: "Estimated recovered revenue".into(), lines: revenue });
            let recs: Vec<String> = m.recommendations.iter().map(|r| r.message.clone()).collect();
            out.push(Block::Notes {
                title: "Recommendations".into(),
                lines: if recs.is_empty() { vec!["Nothing to change this month.".into()] } else { recs },
            });
            out
        }
        Content::Custom(c) => {
            let mut out = Vec::new();
            let items: Vec<(String, String)> = c
                .metrics
                .iter()
                .filter_map(|m| {
                    let v = c.totals.get(m.as_str())?;
                    let shown = match v.as_u64() {
                        Some(n) if m.as_str() != "conversion_rate" => int(n),
                        _ => pct(v.as_f64().unwrap_or(0.0)),
                    };
                    Some((m.label().to_owned(), shown))
                })
                .collect();
            if !items.is_empty() {
                out.push(Block::Figures { title: "Totals".into(), items });
            }
            let f = &c.filters;
            let mut filters = Vec::new();
            if let Some(d) = f.device {
                filters.push(format!("Device: {}", d.as_str()));
            }
            if !f.countries.is_empty() {
                filters.push(format!("Countries: {}", f.countries.join(", ")));
            }
            if let Some(e) = &c.event {
                filters.push(format!("Event {}: {} events", e.event_type, int(e.count)));
            }
            if !filters.is_empty() {
                out.push(Block::Notes { title: "Filters".into(), lines: filters });
            }
            if let Some(rows) = &c.by_device {
                out.push(breakdown_table("By device", "Device", rows));
            }
            if let Some(rows) = &c.by_country {
                out.push(breakdown_table("By country", "Country", rows));
            }
            if let Some(vs) = &c.by_variant {
                out.push(Block::Table {
                    title: "By A/B variant".into(),
                    head: ["Variant", "Impressions", "Conversions", "Rate", "Confidence", "Winner"].map(String::from).to_vec(),
                    rows: vs
                        .iter()
                        .map(|v| {
                            vec![
                                v.name.clone(),
                                int(v.impressions),
                                int(v.conversions),
                                pct(v.conversion_rate),
                                pct(v.confidence),
                                if v.is_winner == Some(true) { "yes".into() } else { String::new() },
                            ]
                        })
                        .collect(),
                });
            }
            out
        }
    }
}

/// Key figures for chat messages: the first block's items.
pub fn summary(doc: &RunDocument) -> Vec<(String, String)> {
    blocks(doc)
        .into_iter()
        .find_map(|b| match b {
            Block::Figures { items, .. } => Some(items),
            _ => None,
        })
        .unwrap_or_default()
}

/// A self-contained HTML document (inline styles, as e-mail clients need).
/// `manage` is the link to change the report, shown to Admin recipients only.
pub fn html(doc: &RunDocument, manage: Option<&str>) -> String {
    let mut h = String::new();
    h.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">");
    h.push_str(&format!("<title>{}</title></head>\n", html::escape(&subject(doc))));
    h.push_str("<body style=\"margin:0;padding:24px;background:#f4f5f7;font-family:Helvetica,Arial,sans-serif;color:#1d2330\">\n");
    h.push_str("<div style=\"max-width:680px;margin:0 auto;background:#fff;border-radius:8px;padding:24px\">\n");
    h.push_str(&format!(
        "<p style=\"margin:0;color:#6b7280;font-size:13px\">{} · {}</p>\n<h1 style=\"margin:4px 0 20px;font-size:22px\">{} — {}</h1>\n",
        html::escape(&doc.site.name),
        html::escape(&doc.site.domain),
        html::escape(&doc.report_name),
        html::escape(&period_label(doc))
    ));
    for block in blocks(doc) {
        match block {
            Block::Figures { title, items } => {
                h.push_str(&format!("<h2 style=\"font-size:16px;margin:20px 0 8px\">{}</h2>\n<table style=\"border-collapse:collapse;width:100%\">\n", html::escape(&title)));
                for (k, v) in items {
                    h.push_str(&format!(
                        "<tr><td style=\"padding:6px 8px;border-bottom:1px solid #e5e7eb;color:#4b5563\">{}</td><td style=\"padding:6px 8px;border-bottom:1px solid #e5e7eb;font-weight:bold;text-align:right\">{}</td></tr>\n",
                        html::escape(&k),
                        html::escape(&v)
                    ));
                }
                h.push_str("</table>\n");
            }
            Block::Table { title, head, rows } => {
                h.push_str(&format!("<h2 style=\"font-size:16px;margin:20px 0 8px\">{}</h2>\n<table style=\"border-collapse:collapse;width:100%;font-size:13px\">\n<tr>", html::escape(&title)));
                for c in head {
                    h.push_str(&format!("<th style=\"text-align:left;padding:6px;border-bottom:2px solid #d1d5db\">{}</th>", html::escape(&c)));
                }
                h.push_str("</tr>\n");
                for row in rows {
                    h.push_str("<tr>");
                    for c in row {
                        h.push_str(&format!("<td style=\"padding:6px;border-bottom:1px solid #e5e7eb\">{}</td>", html::escape(&c)));
                    }
                    h.push_str("</tr>\n");
                }
                h.push_str("</table>\n");
            }
            Block::Notes { title, lines } => {
                h.push_str(&format!("<h2 style=\"font-size:16px;margin:20px 0 8px\">{}</h2>\n<ul style=\"padding-left:20px\">\n", html::escape(&title)));
                for l in lines {
                    h.push_str(&format!("<li style=\"margin:4px 0\">{}</li>\n", html::escape(&l)));
                }
                h.push_str("</ul>\n");
            }
        }
    }
    if let Some(url) = manage {
        h.push_str(&format!(
            "<p style=\"margin-top:24px;font-size:13px\"><a href=\"{}\" style=\"color:#2563eb\">Change this report</a> (recipients, schedule, format)</p>\n",
            html::escape(url)
        ));
    }
    h.push_str(&format!(
        "<p style=\"margin-top:24px;color:#6b7280;font-size:12px\">Generated {} by Postern · times in {}</p>\n</div></body></html>\n",
        html::escape(&doc.generated_at),
        html::escape(&doc.site.timezone)
    ));
    h
}

/// The plain-text version of the same report.
pub fn text(doc: &RunDocument, manage: Option<&str>) -> String {
    let mut t = format!("{}\n{} ({})\n", subject(doc), doc.site.name, doc.site.domain);
    for block in blocks(doc) {
        match block {
            Block::Figures { title, items } => {
                t.push_str(&format!("\n{title}\n"));
                for (k, v) in items {
                    t.push_str(&format!("- {k}: {v}\n"));
                }
            }
            Block::Table { title, head, rows } => {
                t.push_str(&format!("\n{title}\n{}\n", head.join(" | ")));
                for row in rows {
                    t.push_str(&format!("{}\n", row.join(" | ")));
                }
            }
            Block::Notes { title, lines } => {
                t.push_str(&format!("\n{title}\n"));
                for l in lines {
                    t.push_str(&format!("- {l}\n"));
                }
            }
        }
    }
    if let Some(url) = manage {
        t.push_str(&format!("\nChange this report: {url}\n"));
    }
    t
}

/// The headline figures as KPI tiles (not for custom reports, whose chosen
/// metrics are their first block).
fn tiles(doc: &RunDocument) -> Option<Vec<Kpi>> {
    let k = match &doc.content {
        Content::Daily(d) => d.kpis,
        Content::Weekly(w) => w.kpis,
        Content::Monthly(m) => m.kpis,
        Content::Custom(_) => return None,
    };
    Some(vec![
        Kpi::new("Sessions", int(k.sessions)),
        Kpi::new("Ad-blocker sessions", int(k.adblock_detected)).note(format!("{} of sessions", pct(k.adblock_share))),
        Kpi::new("Walls displayed", int(k.walls_displayed)),
        Kpi::new("Conversions", int(k.conversions)).note(format!("{} of walls", pct(k.conversion_rate))),
    ])
}

/// Conversions per day (weekly), sessions per week (monthly), sessions per day (custom).
fn chart(doc: &RunDocument) -> Option<(&'static str, Chart)> {
    let (title, kind, labels, values): (&str, ChartKind, Vec<String>, Vec<f64>) = match &doc.content {
        Content::Daily(_) => return None,
        Content::Weekly(w) => (
            "Conversions per day",
            ChartKind::Bars,
            w.days.iter().map(|d| d.date.format("%a %d").to_string()).collect(),
            w.days.iter().map(|d| d.kpis.conversions as f64).collect(),
        ),
        Content::Monthly(m) => (
            "Sessions per week",
            ChartKind::Bars,
            m.weeks.iter().map(|w| w.week.clone()).collect(),
            m.weeks.iter().map(|w| w.kpis.sessions as f64).collect(),
        ),
        Content::Custom(c) => {
            let values: Option<Vec<f64>> = c.days.iter().map(|d| d.get("sessions").and_then(|v| v.as_f64())).collect();
            let labels = c.days.iter().map(|d| d.get("date").and_then(|v| v.as_str()).unwrap_or_default().to_owned()).collect();
            ("Sessions per day", ChartKind::Line, labels, values.filter(|v| v.len() > 1)?)
        }
    };
    Some((title, Chart { kind, labels, values }))
}

/// The report as a PDF document: title, KPI tiles, a chart, then every block.
pub fn pdf(doc: &RunDocument) -> analytics::Result<Vec<u8>> {
    let mut d = Document::new(format!("{}: {}", doc.report_name, period_label(doc)));
    d.subtitle(format!("{} ({})", doc.site.name, doc.site.domain));
    d.subtitle(format!("{} to {}, days in {}", doc.period.start, doc.period.end, doc.site.timezone));
    d.footer(format!("Postern · generated {}", doc.generated_at));
    if let Some(t) = tiles(doc) {
        d.kpis(t);
    }
    if let Some((title, c)) = chart(doc) {
        d.heading(title);
        d.chart(c);
    }
    for block in blocks(doc) {
        match block {
            Block::Figures { title, items } => {
                d.heading(title);
                let mut t = pdf::Table::new(&[("Figure", Align::Left), ("Value", Align::Right)]);
                for (k, v) in items {
                    t.row([k, v]);
                }
                d.table(t);
            }
            Block::Table { title, head, rows } => {
                d.heading(title);
                let columns: Vec<(&str, Align)> =
                    head.iter().enumerate().map(|(i, h)| (h.as_str(), if i == 0 { Align::Left } else { Align::Right })).collect();
                let mut t = pdf::Table::new(&columns);
                for row in rows {
                    t.row(row);
                }
                d.table(t);
            }
            Block::Notes { title, lines } => {
                d.heading(title);
                for l in lines {
                    d.paragraph(l);
                }
            }
        }
    }
    d.render()
}

/// The run's figures per day (per week for monthly reports) as RFC 4180 CSV.
pub fn csv(doc: &RunDocument) -> String {
    let mut out = String::from("period_start,period_end,sessions,adblock_detected,walls_displayed,conversions,conversion_rate\n");
    let mut line = |s: NaiveDate, e: NaiveDate, k: &Kpis| {
        out.push_str(&format!(
            "{s},{e},{},{},{},{},{:.2}\n",
            k.sessions, k.adblock_detected, k.walls_displayed, k.conversions, k.conversion_rate
        ));
    };
    match &doc.content {
        Content::Daily(d) => line(doc.period.start, doc.period.end, &d.kpis),
        Content::Weekly(w) => w.days.iter().for_each(|d| line(d.date, d.date, &d.kpis)),
        Content::Monthly(m) => m.weeks.iter().for_each(|w| line(w.start, w.end, &w.kpis)),
        Content::Custom(c) => {
            // Only the chosen metrics, one row per day.
            let cols: Vec<&str> = c.metrics.iter().map(|m| m.as_str()).filter(|m| c.totals.contains_key(*m)).collect();
            out = format!("date,{}\n", cols.join(","));
            for row in &c.days {
                let date = row.get("date").and_then(|v| v.as_str()).unwrap_or_default();
                let values: Vec<String> = cols.iter().map(|k| row.get(*k).map(|v| v.to_string()).unwrap_or_default()).collect();
                out.push_str(&format!("{date},{}\n", values.join(",")));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(int(0), "0");
        assert_eq!(int(999), "999");
        assert_eq!(int(1234567), "1,234,567");
        assert_eq!(points(-1.5), "-1.50 points");
        assert_eq!(html::escape("<b>\"A&B\"</b>"), "&lt;b&gt;&quot;A&amp;B&quot;&lt;/b&gt;");
    }
}
