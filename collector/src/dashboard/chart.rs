//! The conversions chart as server-rendered SVG: bars for conversions per
//! bucket on the left scale, a line for the conversion rate on the right one.
//! No JavaScript; each bar carries a tooltip, and the page repeats the data
//! as a table for screen readers.

use std::fmt::Write;

use analytics::query::{Granularity, TimelineBucket};

use crate::html;

const W: f64 = 720.0;
const H: f64 = 260.0;
const LEFT: f64 = 48.0;
const RIGHT: f64 = 48.0;
const TOP: f64 = 14.0;
const BOTTOM: f64 = 34.0;
/// At most this many bucket labels under the x axis, so they never overlap.
const MAX_X_LABELS: usize = 8;
const Y_TICKS: u32 = 5;

/// A round number at least `x`, so the scale's ticks are readable.
fn nice_ceiling(x: f64) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    let magnitude = 10f64.powf(x.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * magnitude).find(|v| *v >= x).unwrap_or(10.0 * magnitude)
}

/// The short label of a bucket: `11-20` for a day or week, `11-20 08h` for an hour.
fn short_label(bucket: &str, g: Granularity) -> String {
    match g {
        Granularity::Hour if bucket.len() >= 13 => format!("{} {}h", &bucket[5..10], &bucket[11..13]),
        _ if bucket.len() >= 10 => bucket[5..10].to_owned(),
        _ => bucket.to_owned(),
    }
}

fn number(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

pub fn conversions_svg(buckets: &[TimelineBucket], g: Granularity) -> String {
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let n = buckets.len().max(1);
    let slot = plot_w / n as f64;
    let max_conv = nice_ceiling(buckets.iter().map(|b| b.conversions).max().unwrap_or(0) as f64);
    let max_rate = nice_ceiling(buckets.iter().map(|b| b.conversion_rate).fold(0.0, f64::max));
    let y_conv = |v: f64| TOP + plot_h - v / max_conv * plot_h;
    let y_rate = |v: f64| TOP + plot_h - v / max_rate * plot_h;
    let total: u64 = buckets.iter().map(|b| b.conversions).sum();

    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="chart-svg" viewBox="0 0 {W} {H}" role="img" aria-labelledby="chart-svg-title chart-svg-desc" xmlns="http://www.w3.org/2000/svg">"#
    );
    let _ = write!(
        s,
        r#"<title id="chart-svg-title">Conversions by {}</title><desc id="chart-svg-desc">{} buckets, {} conversions in all; the highest bucket has {}.</desc>"#,
        g.as_str(),
        buckets.len(),
        total,
        buckets.iter().map(|b| b.conversions).max().unwrap_or(0)
    );
    for i in 0..=Y_TICKS {
        let f = f64::from(i) / f64::from(Y_TICKS);
        let y = TOP + plot_h - f * plot_h;
        let _ = write!(s, r#"<line class="grid" x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}"/>"#, W - RIGHT);
        let _ = write!(s, r#"<text class="axis" x="{}" y="{:.1}" text-anchor="end">{}</text>"#, LEFT - 6.0, y + 4.0, number(f * max_conv));
        let _ = write!(s, r#"<text class="axis" x="{}" y="{:.1}" text-anchor="start">{} %</text>"#, W - RIGHT + 6.0, y + 4.0, number(f * max_rate));
    }
    let bar_w = (slot * 0.7).max(1.0);
    for (i, b) in buckets.iter().enumerate() {
        let x = LEFT + i as f64 * slot + (slot - bar_w) / 2.0;
        let y = y_conv(b.conversions as f64);
        let _ = write!(
            s,
            r#"<rect class="bar" x="{x:.2}" y="{y:.2}" width="{bar_w:.2}" height="{:.2}"><title>{}: {} conversions, {} % of {} walls</title></rect>"#,
            TOP + plot_h - y,
            html::escape(&b.bucket),
            b.conversions,
            b.conversion_rate,
            b.walls_displayed
        );
    }
    let points: Vec<String> = buckets
        .iter()
        .enumerate()
        .map(|(i, b)| format!("{:.2},{:.2}", LEFT + (i as f64 + 0.5) * slot, y_rate(b.conversion_rate)))
        .collect();
    if points.len() > 1 {
        let _ = write!(s, r#"<polyline class="rate" fill="none" points="{}"/>"#, points.join(" "));
    }
    let step = buckets.len().div_ceil(MAX_X_LABELS).max(1);
    for (i, b) in buckets.iter().enumerate().step_by(step) {
        let x = LEFT + (i as f64 + 0.5) * slot;
        let _ = write!(s, r#"<text class="axis" x="{x:.1}" y="{}" text-anchor="middle">{}</text>"#, H - BOTTOM + 18.0, html::escape(&short_label(&b.bucket, g)));
    }
    let _ = write!(s, r#"<line class="baseline" x1="{LEFT}" x2="{}" y1="{}" y2="{}"/>"#, W - RIGHT, TOP + plot_h, TOP + plot_h);
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(label: &str, walls: u64, conversions: u64) -> TimelineBucket {
        TimelineBucket {
            bucket: label.to_owned(),
            sessions: walls * 3,
            adblock_detected: walls,
            walls_displayed: walls,
            conversions,
            conversion_rate: if walls == 0 { 0.0 } else { (conversions as f64 * 10000.0 / walls as f64).round() / 100.0 },
        }
    }

    #[test]
    fn one_bar_per_bucket_scaled_to_the_largest() {
        let buckets = vec![bucket("2026-11-18", 10, 2), bucket("2026-11-19", 10, 4), bucket("2026-11-20", 0, 0)];
        let svg = conversions_svg(&buckets, Granularity::Day);
        assert_eq!(svg.matches("<rect class=\"bar\"").count(), 3);
        assert!(svg.contains("2026-11-19: 4 conversions, 40 % of 10 walls"), "{svg}");
        // The tallest bar (4 of a scale of 5) is 4/5 of the plot's height.
        let plot_h = H - TOP - BOTTOM;
        assert!(svg.contains(&format!("height=\"{:.2}\"", 0.8 * plot_h)), "{svg}");
        assert!(svg.contains(">11-19<"));
        assert!(svg.contains("<polyline"));
    }

    #[test]
    fn hour_labels_and_empty_data() {
        assert_eq!(short_label("2026-11-20T08:00:00+01:00", Granularity::Hour), "11-20 08h");
        let svg = conversions_svg(&[], Granularity::Week);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(17.0), 20.0);
        assert_eq!(nice_ceiling(3.2), 5.0);
    }
}
