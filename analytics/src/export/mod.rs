//! Exports of a site's analytics for a period: CSV for spreadsheets, JSON for
//! integrations, a PDF for presentation and a ZIP with the complete history.
//!
//! Everything is read from `rollup_hourly` (the one rollup with country), so
//! the totals are the dashboard's for the same period and device. Writers
//! take any `io::Write` and produce their rows as the query yields them: the
//! CSV and the ZIP never hold a period's rows in memory.

pub mod csv;
pub mod json;
mod overview;
pub mod pdf;
mod summary;
pub mod zip;

use crate::model::{Device, Site};
use crate::period::Period;

pub use overview::render_pdf;
pub use summary::Summary;

/// What an export covers: a period of local days, and optionally one device
/// and a set of countries (ISO 3166 alpha-2, upper case).
#[derive(Debug, Clone)]
pub struct Selection {
    pub period: Period,
    pub device: Option<Device>,
    pub countries: Vec<String>,
}

impl Selection {
    /// The countries as a JSON array for `json_each`, `None` for all countries.
    fn countries_param(&self) -> Option<String> {
        (!self.countries.is_empty()).then(|| serde_json::Value::from(self.countries.clone()).to_string())
    }

    /// A file name that says what the file holds, e.g.
    /// `postern-news.example.com-2026-10-22-to-2026-11-20-mobile-FR-DE.csv`.
    pub fn file_name(&self, site: &Site, extension: &str) -> String {
        let mut name = format!("postern-{}-{}-to-{}", file_safe(&site.domain), self.period.start, self.period.end);
        if let Some(d) = self.device {
            name.push('-');
            name.push_str(d.as_str());
        }
        for c in &self.countries {
            name.push('-');
            name.push_str(&file_safe(c));
        }
        format!("{name}.{extension}")
    }

    /// A human description of the filters, or `None` when there are none.
    pub fn describe_filters(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(d) = self.device {
            parts.push(format!("device {}", d.as_str()));
        }
        if !self.countries.is_empty() {
            parts.push(format!("countries {}", self.countries.join(", ")));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

/// Keeps only characters every file system and `Content-Disposition` accept.
fn file_safe(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' }).collect()
}

/// The rollup filter shared by every export query: site, UTC hours, device
/// and countries as parameters ?1 to ?5.
const ROLLUP_FILTER: &str = "site = ?1 AND hour >= ?2 AND hour < ?3 AND (device = ?4 OR ?4 IS NULL)
     AND (country IN (SELECT value FROM json_each(?5)) OR ?5 IS NULL)";

#[cfg(test)]
mod tests {
    use crate::Store;

    /// A temporary B-tree would make SQLite collect (and sort) the whole
    /// period before the first row comes out: the exports would not stream.
    #[test]
    fn streams_without_sorting() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("plan.db")).unwrap();
        for sql in [super::csv::rows_sql(), super::zip::events_sql(crate::db::Engine::Sqlite)] {
            for args in [(None, None), (Some(1), Some("[\"FR\"]"))] {
                let plan: Vec<String> = store
                    .read(|c| {
                        let mut stmt = c.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?;
                        let rows = stmt.query_map(crate::params![1, 0, 1_000_000, args.0, args.1], |r| r.get::<_, String>(3))?;
                        Ok(rows.collect::<crate::Result<Vec<_>>>()?)
                    })
                    .unwrap();
                assert!(!plan.iter().any(|step| step.contains("TEMP B-TREE")), "{sql}\n{plan:#?}");
            }
        }
    }
}
