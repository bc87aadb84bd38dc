//! The Slack-type incoming-webhook message: `text` (what notifications and
//! clients without blocks show) plus blocks with a header, the text and the
//! summary as fields.

use serde_json::{json, Value};

use super::Notification;

/// Slack's limits: header text, section text, field text, fields per section.
const HEADER_MAX: usize = 150;
const TEXT_MAX: usize = 3000;
const FIELD_MAX: usize = 2000;
const FIELDS_MAX: usize = 10;

pub(super) fn message(n: &Notification) -> Value {
    let mut blocks = vec![
        json!({ "type": "header", "text": { "type": "plain_text", "text": truncate(&n.subject, HEADER_MAX) } }),
        json!({ "type": "section", "text": { "type": "mrkdwn", "text": truncate(&n.text, TEXT_MAX) } }),
    ];
    for chunk in n.summary.chunks(FIELDS_MAX) {
        let fields: Vec<Value> = chunk
            .iter()
            .map(|(label, value)| json!({ "type": "mrkdwn", "text": truncate(&format!("*{label}*\n{value}"), FIELD_MAX) }))
            .collect();
        blocks.push(json!({ "type": "section", "fields": fields }));
    }
    json!({ "text": truncate(&format!("{}\n{}", n.subject, n.text), TEXT_MAX), "blocks": blocks })
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max - 1).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_fields_go_ten_per_section_and_long_texts_are_cut() {
        let n = Notification {
            site_id: String::new(),
            event: "daily_report".into(),
            dedupe_key: String::new(),
            subject: "s".repeat(200),
            text: "Yesterday".into(),
            summary: (0..12).map(|i| (format!("L{i}"), i.to_string())).collect(),
            data: Value::Null,
            emails: Vec::new(),
            channels: Vec::new(),
        };
        let m = message(&n);
        let blocks = m["blocks"].as_array().unwrap();
        assert_eq!(blocks.len(), 4);
        assert_eq!(blocks[0]["text"]["text"].as_str().unwrap().chars().count(), HEADER_MAX);
        assert_eq!(blocks[2]["fields"].as_array().unwrap().len(), 10);
        assert_eq!(blocks[3]["fields"][1]["text"], "*L11*\n11");
        assert!(m["text"].as_str().unwrap().ends_with("\nYesterday"));
    }
}
