//! A/B statistics of wall variants: conversion rates, two-proportion z-test
//! confidence and the winner rule of DESIGN §3. Pure functions, no I/O.

use serde::{Deserialize, Serialize};

/// The name of the variant every other one is compared with.
pub const CONTROL: &str = "control";
/// Confidence (percent) a variant needs to be declared the winner.
pub const WINNING_CONFIDENCE: f64 = 95.0;
/// Impressions each side of the comparison needs before a winner is declared.
pub const MIN_IMPRESSIONS: u64 = 100;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VariantCounts {
    pub name: String,
    pub impressions: u64,
    pub conversions: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantResult {
    pub name: String,
    pub impressions: u64,
    pub conversions: u64,
    /// conversions ÷ impressions × 100, two decimals.
    pub conversion_rate: f64,
    /// 100 × (1 − p) of the two-sided test against the comparison variant, two decimals.
    pub confidence: f64,
    /// Relative change of the rate versus control, in percent; absent for control
    /// itself or when control has no conversions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lift: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub is_winner: Option<bool>,
}

pub fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// `part ÷ whole × 100`, two decimals, 0 when `whole` is 0.
pub fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        round2(part as f64 * 100.0 / whole as f64)
    }
}

fn raw_rate(v: &VariantCounts) -> f64 {
    if v.impressions == 0 {
        0.0
    } else {
        v.conversions as f64 / v.impressions as f64
    }
}

/// Two-sided two-proportion z-test: returns 100 × (1 − p), or 0 when either
/// side has no impressions or the pooled rate leaves no variance.
pub fn confidence(a: &VariantCounts, b: &VariantCounts) -> f64 {
    if a.impressions == 0 || b.impressions == 0 {
        return 0.0;
    }
    let (n1, n2) = (a.impressions as f64, b.impressions as f64);
    let pooled = (a.conversions + b.conversions) as f64 / (n1 + n2);
    let se = (pooled * (1.0 - pooled) * (1.0 / n1 + 1.0 / n2)).sqrt();
    if se == 0.0 || !se.is_finite() {
        return 0.0;
    }
    let z = (raw_rate(a) - raw_rate(b)) / se;
    let p = libm::erfc(z.abs() / std::f64::consts::SQRT_2);
    round2(100.0 * (1.0 - p))
}

/// Evaluates every variant against its comparison: the control variant (the
/// first listed when none is named `control`), and for the control itself the
/// best of the others. At most one variant is marked the winner.
pub fn evaluate(variants: &[VariantCounts]) -> Vec<VariantResult> {
    let Some(base_idx) = variants.iter().position(|v| v.name == CONTROL).or(if variants.is_empty() { None } else { Some(0) })
    else {
        return Vec::new();
    };
    let base = &variants[base_idx];
    // Best other: highest rate, then most impressions, then listing order.
    let best_other = variants
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != base_idx)
        .max_by(|(ia, a), (ib, b)| {
            raw_rate(a)
                .total_cmp(&raw_rate(b))
                .then(a.impressions.cmp(&b.impressions))
                .then(ib.cmp(ia))
        })
        .map(|(i, _)| i);
    let partner = |i: usize| if i == base_idx { best_other } else { Some(base_idx) };

    let mut results: Vec<VariantResult> = variants
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let confidence = partner(i).map_or(0.0, |p| confidence(v, &variants[p]));
            let lift = (i != base_idx && base.conversions > 0)
                .then(|| round2((raw_rate(v) - raw_rate(base)) / raw_rate(base) * 100.0));
            VariantResult {
                name: v.name.clone(),
                impressions: v.impressions,
                conversions: v.conversions,
                conversion_rate: percent(v.conversions, v.impressions),
                confidence,
                lift,
                is_winner: None,
            }
        })
        .collect();

    let top_rate = variants.iter().map(raw_rate).fold(f64::NEG_INFINITY, f64::max);
    let tops: Vec<usize> = (0..variants.len()).filter(|&i| raw_rate(&variants[i]) == top_rate).collect();
    if let [top] = tops[..] {
        if let Some(p) = partner(top) {
            let significant = results[top].confidence >= WINNING_CONFIDENCE;
            let enough = variants[top].impressions >= MIN_IMPRESSIONS && variants[p].impressions >= MIN_IMPRESSIONS;
            if significant && enough {
                results[top].is_winner = Some(true);
            }
        }
    }
    results
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(name: &str, impressions: u64, conversions: u64) -> VariantCounts {
        VariantCounts { name: name.into(), impressions, conversions }
    }

    #[test]
    fn z_test_matches_a_hand_computed_value() {
        // p1 = 0.2, p2 = 0.1, n = 500 each: pooled 0.15, se = sqrt(0.1275 * 0.004) = 0.022583,
        // z = 4.4281, two-sided p = 9.5e-6.
        let c = confidence(&v("a", 500, 100), &v("b", 500, 50));
        assert_eq!(c, 100.0);
        // p1 = 0.12, p2 = 0.10, n = 1000 each: z = 1.4285, p = 0.1531 → 84.69 %.
        let c = confidence(&v("a", 1000, 120), &v("b", 1000, 100));
        assert!((c - 84.69).abs() < 0.02, "{c}");
    }

    #[test]
    fn significant_best_variant_wins() {
        let r = evaluate(&[v("control", 1000, 100), v("emotional", 1000, 150), v("offer", 1000, 110)]);
        assert_eq!(r[1].is_winner, Some(true));
        assert!(r[1].confidence >= 95.0);
        assert_eq!(r[0].is_winner, None);
        assert_eq!(r[2].is_winner, None);
        assert_eq!(r[1].conversion_rate, 15.0);
        assert_eq!(r[1].lift, Some(50.0));
        assert_eq!(r[0].lift, None);
        // Control is compared with the best other variant.
        assert_eq!(r[0].confidence, confidence(&v("c", 1000, 100), &v("e", 1000, 150)));
    }

    #[test]
    fn control_can_win() {
        let r = evaluate(&[v("control", 800, 200), v("emotional", 800, 120)]);
        assert_eq!(r[0].is_winner, Some(true));
    }

    #[test]
    fn no_winner_without_significance_or_volume() {
        let r = evaluate(&[v("control", 1000, 100), v("emotional", 1000, 110)]);
        assert!(r.iter().all(|x| x.is_winner.is_none()));
        // Large effect but too few impressions on the control side.
        let r = evaluate(&[v("control", 99, 5), v("emotional", 5000, 2500)]);
        assert!(r[1].confidence >= 95.0);
        assert!(r.iter().all(|x| x.is_winner.is_none()));
    }

    #[test]
    fn tied_leaders_mean_no_winner() {
        let r = evaluate(&[v("control", 1000, 50), v("emotional", 1000, 200), v("offer", 1000, 200)]);
        assert!(r.iter().all(|x| x.is_winner.is_none()));
    }

    #[test]
    fn empty_and_zero_inputs_are_calm() {
        assert!(evaluate(&[]).is_empty());
        let r = evaluate(&[v("control", 0, 0), v("emotional", 0, 0)]);
        assert!(r.iter().all(|x| x.conversion_rate == 0.0 && x.confidence == 0.0 && x.is_winner.is_none()));
        let json = serde_json::to_value(&r[0]).unwrap();
        assert!(json.get("is_winner").is_none(), "is_winner must be absent, got {json}");
    }
}
