//! The dashboard's Reports tab over real HTTP, signed in with CSRF tokens:
//! creating, refusing, editing and deleting report configs, "send now" with the
//! run in the history and in a real SMTP server's mailbox, the Admin e-mail's
//! link opening the report's page, and a Reader refused every change.

use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Europe::Paris;
use serde_json::{json, Value};

use crate::dashboard::{create_user, csrf, table_rows, unescape, Browser, PASSWORD};
use crate::receivers::SmtpReceiver;
use crate::reports::pdf_text;
use crate::support::{event, id, TestApp};

fn reports_path(site: &str) -> String {
    format!("/dashboard/sites/{site}/reports")
}

fn api_reports(app: &TestApp, site: &str) -> Vec<Value> {
    app.get(&format!("/v1/sites/{site}/reports")).expect(200).body["reports"].as_array().unwrap().clone()
}

/// The report's id from the 303 that follows its creation.
#[track_caller]
fn created_id(a: &crate::support::Answer, site: &str) -> String {
    assert_eq!(a.status, 303, "{}", a.text);
    let location = a.header("location").unwrap();
    let prefix = format!("/dashboard/sites/{site}/reports/");
    let rest = location.strip_prefix(&prefix).unwrap_or_else(|| panic!("unexpected location {location}"));
    let (rid, query) = rest.split_once('?').unwrap();
    assert_eq!(query, "created=1");
    rid.to_owned()
}

/// The text of the field error shown for a form control.
#[track_caller]
fn field_error(page: &str, control: &str) -> String {
    let marker = format!("<small class=\"field-error\" id=\"{control}-error\">");
    let start = page.find(&marker).unwrap_or_else(|| panic!("no error shown for {control} in:\n{page}")) + marker.len();
    page[start..].split('<').next().unwrap().to_owned()
}

/// Whether some control's `aria-describedby` names this element id.
fn described_by(page: &str, id: &str) -> bool {
    page.split("aria-describedby=\"").skip(1).any(|rest| rest.split('"').next().unwrap().split(' ').any(|i| i == id))
}

/// The local time the dashboard shows for an instant of the API.
fn local(api_instant: &Value) -> String {
    let at: DateTime<Utc> = api_instant.as_str().unwrap().parse().unwrap();
    at.with_timezone(&Paris).format("%a %-d %b %Y, %H:%M %Z").to_string()
}

const WEEKLY: &[(&str, &str)] = &[
    ("name", "Friday digest"),
    ("type", "weekly"),
    ("enabled", "on"),
    ("frequency", "daily"),
    ("weekday", "friday"),
    ("day_of_month", "1"),
    ("time", "07:30"),
    ("recipient_email", "ana@example.com"),
    ("recipient_role", "Admin"),
    ("recipient_email", "bob@example.com"),
    ("recipient_role", "Reader"),
    ("recipient_email", ""),
    ("recipient_role", "Reader"),
    ("channels", "email"),
    ("channels", "slack"),
    ("format", "pdf"),
];

/// `WEEKLY` with some fields replaced (every value of a replaced name goes).
fn weekly_with<'a>(token: &'a str, changes: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut form = vec![("csrf", token)];
    form.extend(WEEKLY.iter().copied().filter(|(k, _)| !changes.iter().any(|(c, _)| c == k)));
    form.extend(changes.iter().copied());
    form
}

#[test]
fn reports_are_created_refused_with_field_errors_edited_and_deleted() {
    let app = TestApp::spawn();
    create_user(&app, "ann@example.com", "admin");
    let site = id(&app.create_site("courier.example.com", "Europe/Paris"));
    app.post(&format!("/v1/sites/{site}/integrations"), &json!({"kind": "slack", "name": "#growth", "url": "https://hooks.example.com/T1", "events": ["weekly_report"]}))
        .expect(201);
    let mut b = Browser::new(&app);
    b.login("ann@example.com");

    let overview = b.get(&format!("/dashboard/sites/{site}"));
    assert!(unescape(&overview.text).contains(&format!("href=\"/dashboard/sites/{site}/reports\">Reports</a>")), "the Reports tab is in the site tabs");
    let list = b.get(&reports_path(&site));
    list.expect(200);
    assert!(unescape(&list.text).contains(&format!("href=\"/dashboard/sites/{site}/reports\" aria-current=\"page\">Reports")));
    assert!(list.text.contains("No reports yet"));
    let page = unescape(&list.text);
    assert!(page.contains("<legend>Schedule <span class=\"muted\">(in Europe/Paris)</span></legend>"), "{page}");
    assert!(page.contains("integrations that receive the report's event: #growth (weekly_report)"), "the Slack channel names the integration: {page}");
    let token = csrf(&list);

    // Refusals: the API's message next to the field, what was typed kept, nothing stored.
    // (fields changed, the control refused, the API's message)
    type Refusal<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);
    let refused: &[Refusal] = &[
        (&[("time", "7h30")], "time", "schedule.time must be HH:MM (24-hour clock)"),
        (&[("recipient_email", "ana@example.com"), ("recipient_role", "Admin"), ("recipient_email", "not-an-address"), ("recipient_role", "Reader")], "recipient_email_1", "email must be an e-mail address such as ana@example.com"),
        (&[("recipient_email", "ana@example.com"), ("recipient_role", "Admin"), ("recipient_email", "ANA@example.com"), ("recipient_role", "Reader")], "recipient_email_1", "ANA@example.com is listed twice"),
        (&[("channels", "")], "channels", "a channel is email, slack or webhook"),
        (&[("type", "custom"), ("frequency", "weekly")], "metrics", "choose at least one metric"),
        (&[("type", "custom"), ("metrics", "sessions"), ("filter_start", "2026-03-01")], "filter_end", "filters.end is required with filters.start"),
        (&[("type", "custom"), ("metrics", "sessions"), ("filter_countries", "FR, France")], "filter_countries", "a country is a two-letter ISO 3166 code"),
        (&[("type", "hourly")], "type", "type must be daily, weekly, monthly or custom"),
        (&[("type", "monthly"), ("day_of_month", "31")], "day_of_month", "schedule.day_of_month must be 1 to 28"),
    ];
    for (changes, control, message) in refused {
        let a = b.post(&reports_path(&site), &weekly_with(&token, changes));
        assert_eq!(a.status, 400, "{changes:?}: {}", a.text);
        let page = unescape(&a.text);
        assert_eq!(field_error(&page, control), *message, "{changes:?}");
        assert!(page.contains(&format!("The report was not saved: {message}")), "the summary at the top of the form");
        assert!(described_by(&page, &format!("{control}-error")), "{control} points at its error: {page}");
        assert!(page.contains("value=\"Friday digest\""), "the name typed is kept");
        for (_, v) in changes.iter().filter(|(k, _)| ["time", "recipient_email", "filter_countries", "day_of_month"].contains(k)) {
            assert!(page.contains(&format!("value=\"{v}\"")), "{v} is kept: {page}");
        }
    }
    assert!(api_reports(&app, &site).is_empty(), "no refused form stored anything");

    // Created: the API shows what the form chose.
    let a = b.post(&reports_path(&site), &weekly_with(&token, &[]));
    let rid = created_id(&a, &site);
    let report = app.get(&format!("/v1/sites/{site}/reports/{rid}")).expect(200).body.clone();
    assert_eq!(report["name"], "Friday digest");
    assert_eq!(report["type"], "weekly");
    assert_eq!(report["schedule"], json!({"frequency": "weekly", "weekday": "friday", "time": "07:30"}));
    assert_eq!(report["recipients"], json!([{"email": "ana@example.com", "role": "admin"}, {"email": "bob@example.com", "role": "reader"}]));
    assert_eq!((report["channels"].clone(), report["format"].as_str()), (json!(["email", "slack"]), Some("pdf")));
    let page = b.get(&format!("/dashboard/sites/{site}/reports/{rid}?created=1"));
    page.expect(200);
    assert!(page.text.contains("The report is created."));
    let list = b.get(&reports_path(&site));
    let text = unescape(&list.text);
    assert!(text.contains("Every Friday at 07:30 (Europe/Paris)"), "{text}");
    assert!(text.contains(&local(&report["next_run_at"])), "next run in the site's time: {} in {text}", local(&report["next_run_at"]));
    assert!(text.contains("slack → #growth"), "{text}");
    assert!(text.contains("ana@example.com <span class=\"badge\">Admin</span>") && text.contains("bob@example.com <span class=\"badge\">Reader</span>"));

    // A custom report with its metrics and filters.
    let custom = b.post(
        &reports_path(&site),
        &weekly_with(
            &token,
            &[
                ("name", "Mobile in France"),
                ("type", "custom"),
                ("frequency", "monthly"),
                ("day_of_month", "2"),
                ("metrics", "sessions"),
                ("metrics", "by_variant"),
                ("filter_device", "mobile"),
                ("filter_countries", "fr, be"),
                ("filter_event", "wall_displayed"),
                ("channels", "webhook"),
                ("format", "json"),
            ],
        ),
    );
    let custom_id = created_id(&custom, &site);
    let custom = app.get(&format!("/v1/sites/{site}/reports/{custom_id}")).expect(200).body.clone();
    assert_eq!(custom["metrics"], json!(["sessions", "by_variant"]));
    assert_eq!(custom["filters"], json!({"device": "mobile", "countries": ["FR", "BE"], "event": "wall_displayed"}));
    assert_eq!(custom["schedule"], json!({"frequency": "monthly", "day_of_month": 2, "time": "07:30"}));
    let page = unescape(&b.get(&format!("/dashboard/sites/{site}/reports/{custom_id}")).text);
    assert!(page.contains("On the 2nd of each month at 07:30") && page.contains("mobile; FR, BE; event wall_displayed"), "{page}");
    assert!(page.contains("no webhook integration receives custom_report"), "a channel nobody receives is pointed out: {page}");

    // Edited: the page's form starts from the stored report.
    let path = format!("/dashboard/sites/{site}/reports/{rid}");
    let page = b.get(&path);
    let text = unescape(&page.text);
    assert!(text.contains("id=\"recipient_email_1\" name=\"recipient_email\" type=\"email\" autocomplete=\"off\" value=\"bob@example.com\""), "{text}");
    assert!(text.contains("<option value=\"friday\" selected>"));
    let edit = [
        ("csrf", token.as_str()),
        ("name", "Friday numbers"),
        ("weekday", "friday"),
        ("time", "09:15"),
        ("recipient_email", "ana@example.com"),
        ("recipient_role", "Admin"),
        ("recipient_email", ""),
        ("recipient_role", "Reader"),
        ("recipient_email", "carol@example.com"),
        ("recipient_role", "Reader"),
        ("channels", "email"),
        ("format", "csv"),
    ];
    let a = b.post(&path, &edit);
    assert_eq!((a.status.as_u16(), a.header("location")), (303, Some(format!("{path}?saved=1").as_str())), "{}", a.text);
    let after = app.get(&format!("/v1/sites/{site}/reports/{rid}")).expect(200).body.clone();
    assert_eq!(after["name"], "Friday numbers");
    assert_eq!(after["enabled"], false, "the unchecked box disables the report");
    assert!(after["next_run_at"].is_null());
    assert_eq!(after["schedule"]["time"], "09:15");
    assert_eq!(after["recipients"], json!([{"email": "ana@example.com", "role": "admin"}, {"email": "carol@example.com", "role": "reader"}]));
    assert_eq!((after["channels"].clone(), after["format"].as_str()), (json!(["email"]), Some("csv")));
    let page = b.get(&format!("{path}?saved=1"));
    assert!(page.text.contains("The report is saved.") && page.text.contains("none: the report is disabled"));

    let mut bad = edit.to_vec();
    bad.retain(|(k, _)| *k != "channels");
    let a = b.post(&path, &bad);
    assert_eq!(a.status, 400);
    assert_eq!(field_error(&a.text, "channels"), "choose at least one channel");
    assert!(a.text.contains("value=\"carol@example.com\""), "the typed recipients are kept");
    assert_eq!(app.get(&format!("/v1/sites/{site}/reports/{rid}")).body, after, "a refused edit changes nothing");

    // Deleted: gone from the API and the tab; its page is 404.
    let a = b.post(&format!("{path}/delete"), &[("csrf", &token)]);
    assert_eq!((a.status.as_u16(), a.header("location")), (303, Some(format!("{}?deleted=1", reports_path(&site)).as_str())));
    app.get(&format!("/v1/sites/{site}/reports/{rid}")).expect(404);
    let list = b.get(&format!("{}?deleted=1", reports_path(&site)));
    assert!(list.text.contains("The report is deleted.") && !list.text.contains("Friday numbers") && list.text.contains("Mobile in France"));
    assert_eq!(b.get(&path).status, 404);
    assert_eq!(b.post(&format!("{path}/send"), &[("csrf", &token)]).status, 404);
}

/// Waits until the report page lists `n` deliveries of the run as delivered.
#[track_caller]
fn wait_delivered(b: &mut Browser, path: &str, run: &str, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let page = b.get(path);
        page.expect(200);
        assert!(page.text.contains(&format!("id=\"run-{run}\"")), "the run is in the history");
        let row = table_rows(&page, "runs-table").remove(0);
        if row.get(3).is_some_and(|cell| cell.matches(": delivered").count() == n) {
            return row;
        }
        assert!(Instant::now() < deadline, "the run's deliveries did not arrive: {row:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn send_now_stores_a_run_mails_it_and_the_admin_link_opens_the_report() {
    const WAIT: Duration = Duration::from_secs(60);
    let smtp = SmtpReceiver::start();
    let mut args = vec!["--rate-limit-api".to_owned(), "0".to_owned(), "--public-url".to_owned(), "https://stats.example.com".to_owned()];
    args.extend(smtp.flags());
    let app = TestApp::spawn_with(&args.iter().map(String::as_str).collect::<Vec<_>>());
    create_user(&app, "ann@example.com", "admin");
    let site = id(&app.create_site("courier.example.com", "Europe/Paris"));
    // Three sessions yesterday (local noon), one of them converted.
    let yesterday = Utc::now().with_timezone(&Paris).date_naive().pred_opt().unwrap();
    let noon = Paris.from_local_datetime(&yesterday.and_hms_opt(12, 0, 0).unwrap()).single().unwrap().to_rfc3339();
    let mut events = Vec::new();
    for (session, steps) in [("visit-0001", &["pageview"][..]), ("visit-0002", &["pageview"]), ("visit-0003", &["pageview", "adblock_detected", "wall_displayed", "conversion_allowlist"])] {
        for step in steps {
            events.push(event(&site, session, step, json!({"timestamp": noon, "metadata": {"device_type": "desktop"}})));
        }
    }
    let a = app.batch(&json!(events));
    a.expect(201);
    assert_eq!(a.body["accepted"], events.len(), "{}", a.text);

    let mut b = Browser::new(&app);
    b.login("ann@example.com");
    let token = b.token(&reports_path(&site));
    let form = [
        ("csrf", token.as_str()),
        ("type", "daily"),
        ("enabled", "on"),
        ("time", "08:00"),
        ("recipient_email", "ana@example.com"),
        ("recipient_role", "Admin"),
        ("recipient_email", "bob@example.com"),
        ("recipient_role", "Reader"),
        ("channels", "email"),
        ("format", "pdf"),
    ];
    let rid = created_id(&b.post(&reports_path(&site), &form), &site);
    let path = format!("/dashboard/sites/{site}/reports/{rid}");
    assert!(b.get(&path).text.contains("No run yet."));

    let a = b.post(&format!("{path}/send"), &[("csrf", &token)]);
    assert_eq!(a.status, 303, "{}", a.text);
    let location = a.header("location").unwrap().to_owned();
    let run = location.strip_prefix(&format!("{path}?sent=")).and_then(|r| r.strip_suffix("#runs")).unwrap_or_else(|| panic!("{location}")).to_owned();
    let runs = app.get(&format!("/v1/sites/{site}/reports/{rid}/runs")).expect(200).body["runs"].clone();
    assert_eq!(runs.as_array().unwrap().len(), 1);
    assert_eq!((runs[0]["id"].as_str(), runs[0]["trigger"].as_str()), (Some(run.as_str()), Some("manual")));
    let page = b.get(&location);
    assert!(page.text.contains(&format!("Sent: the run for {yesterday} is stored and handed to delivery.")), "{}", page.text);
    let row = wait_delivered(&mut b, &path, &run, 2);
    assert_eq!(row[1], yesterday.to_string());
    assert_eq!(row[2], "manual");
    assert!(row[3].contains("ana@example.com (email): delivered") && row[3].contains("bob@example.com (email): delivered"), "{row:?}");

    // The mails arrived; only the Admin's carries the link to the report's page.
    let mut mails = [smtp.next_message(WAIT), smtp.next_message(WAIT)];
    mails.sort_by_key(|m| m["rcpt_tos"][0].as_str().unwrap().to_owned());
    let link = format!("https://stats.example.com{path}");
    let (admin, reader) = (&mails[0], &mails[1]);
    assert_eq!((admin["rcpt_tos"].clone(), reader["rcpt_tos"].clone()), (json!(["ana@example.com"]), json!(["bob@example.com"])));
    assert!(admin["html"].as_str().unwrap().contains(&format!("href=\"{link}\"")) && admin["text"].as_str().unwrap().contains(&link), "{admin:#}");
    for part in ["html", "text"] {
        assert!(!reader[part].as_str().unwrap().contains("/dashboard/"), "a Reader's e-mail has no link: {reader:#}");
    }
    assert!(admin["text"].as_str().unwrap().contains("- Sessions: 3 (+3 vs 0 the day before)"), "{}", admin["text"]);
    assert_eq!(admin["attachments"][0]["content_type"], "application/pdf");

    // The link opens the page: straight away for a signed-in Admin, after signing in otherwise.
    let opened = link.strip_prefix("https://stats.example.com").unwrap();
    let page = b.get(opened);
    page.expect(200);
    assert!(page.text.contains("<h1>Daily report</h1>") && page.text.contains(&format!("id=\"run-{run}\"")));
    assert!(page.text.contains("Send now</button>") && page.text.contains("Save report</button>") && page.text.contains("Delete report</button>"));
    let mut fresh = Browser::new(&app);
    let a = fresh.get(opened);
    let next: String = url::form_urlencoded::byte_serialize(opened.as_bytes()).collect();
    assert_eq!((a.status.as_u16(), a.header("location")), (303, Some(format!("/dashboard/login?next={next}").as_str())));
    let login = fresh.get(a.header("location").unwrap());
    let login_token = csrf(&login);
    let a = fresh.post("/dashboard/login", &[("csrf", &login_token), ("email", "ann@example.com"), ("password", PASSWORD), ("next", opened)]);
    assert_eq!((a.status.as_u16(), a.header("location")), (303, Some(opened)), "back to the report after signing in");
    fresh.get(opened).expect(200);

    // The stored run: HTML to read, PDF and JSON to download.
    let file = |format: &str| {
        let res = reqwest::blocking::Client::new()
            .get(app.url(&format!("{path}/runs/{run}?format={format}")))
            .header("Cookie", format!("postern_session={}", b.cookies["postern_session"]))
            .send()
            .unwrap();
        assert_eq!(res.status().as_u16(), 200, "{format}");
        let header = |n: &str| res.headers().get(n).map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
        let (kind, disposition, csp) = (header("content-type"), header("content-disposition"), header("content-security-policy"));
        (kind, disposition, csp, res.bytes().unwrap().to_vec())
    };
    let (kind, disposition, csp, html) = file("html");
    assert_eq!((kind.as_str(), disposition.as_str()), ("text/html; charset=utf-8", ""));
    assert!(csp.starts_with("default-src 'none'"), "{csp}");
    let html = String::from_utf8(html).unwrap();
    assert!(html.contains("Daily report") && html.contains("3 (+3 vs 0 the day before)") && !html.contains("/dashboard/"), "{html}");
    let (kind, disposition, _, pdf) = file("pdf");
    assert_eq!(kind, "application/pdf");
    assert_eq!(disposition, format!("attachment; filename=\"postern-daily-{yesterday}-{yesterday}.pdf\""));
    assert!(pdf_text(&pdf).contains("Daily report"));
    let (kind, disposition, _, doc) = file("json");
    assert_eq!(kind, "application/json");
    assert_eq!(disposition, format!("attachment; filename=\"postern-daily-{yesterday}-{yesterday}.json\""));
    let doc: Value = serde_json::from_slice(&doc).unwrap();
    assert_eq!((doc["id"].as_str(), doc["report_id"].as_str()), (Some(run.as_str()), Some(rid.as_str())));
    assert_eq!(doc, app.get(&format!("/v1/report-runs/{run}")).expect(200).body, "the same document as the API's");
    assert_eq!(b.get(&format!("{path}/runs/{run}?format=xml")).status, 400);
    assert_eq!(b.get(&format!("{path}/runs/{rid}?format=html")).status, 404, "not a run of this report");
    assert!(smtp.pending().is_empty(), "each recipient got one e-mail");
}

#[test]
fn a_reader_sees_reports_and_runs_but_every_change_is_refused() {
    let app = TestApp::spawn();
    create_user(&app, "rita@example.com", "reader");
    let site = id(&app.create_site("courier.example.com", "Europe/Paris"));
    let report = app
        .post(&format!("/v1/sites/{site}/reports"), &json!({"type": "daily", "recipients": [{"email": "rita@example.com", "role": "Reader"}], "channels": ["email"]}))
        .expect(201)
        .body
        .clone();
    let rid = report["id"].as_str().unwrap().to_owned();
    let run = app.post(&format!("/v1/sites/{site}/reports/{rid}/send"), &json!({})).expect(201).body["id"].as_str().unwrap().to_owned();
    let mut b = Browser::new(&app);
    b.login("rita@example.com");

    let list = b.get(&reports_path(&site));
    list.expect(200);
    assert!(list.text.contains("Daily report") && list.text.contains("You are a Reader"));
    assert!(!list.text.contains("New report") && !list.text.contains("method=\"post\" action=\"/dashboard/sites"), "no form to change anything");
    let path = format!("/dashboard/sites/{site}/reports/{rid}");
    let page = b.get(&path);
    page.expect(200);
    assert!(page.text.contains(&format!("id=\"run-{run}\"")), "the run history is readable");
    for button in ["Send now", "Save report", "Delete report"] {
        assert!(!page.text.contains(button), "{button} is not offered to a Reader");
    }
    b.get(&format!("{path}/runs/{run}?format=html")).expect(200);
    b.get(&format!("{path}/runs/{run}?format=json")).expect(200);

    let token = b.token(&path);
    let form: Vec<(&str, &str)> = weekly_with(&token, &[]);
    for (target, fields) in [
        (reports_path(&site), form.clone()),
        (path.clone(), form.clone()),
        (format!("{path}/send"), vec![("csrf", token.as_str())]),
        (format!("{path}/delete"), vec![("csrf", token.as_str())]),
    ] {
        let a = b.post(&target, &fields);
        assert_eq!(a.status, 403, "POST {target}: {}", a.text);
        assert!(a.text.contains("only an Admin"), "{}", a.text);
        let a = b.post(&target, &fields[1..]);
        assert_eq!(a.status, 403, "POST {target} without a token");
    }
    let reports = api_reports(&app, &site);
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0], app.get(&format!("/v1/sites/{site}/reports/{rid}")).body, "the report is unchanged");
    assert_eq!(reports[0]["updated_at"], report["updated_at"]);
    assert_eq!(app.get(&format!("/v1/sites/{site}/reports/{rid}/runs")).body["total"], 1, "no run was sent");
}

#[test]
fn another_accounts_admin_finds_neither_the_report_nor_its_runs() {
    let app = TestApp::spawn();
    let site = id(&app.create_site("courier.example.com", "Europe/Paris"));
    let rid = app.post(&format!("/v1/sites/{site}/reports"), &json!({"type": "daily", "channels": ["webhook"]})).expect(201).body["id"].as_str().unwrap().to_owned();
    let run = app.post(&format!("/v1/sites/{site}/reports/{rid}/send"), &json!({})).expect(201).body["id"].as_str().unwrap().to_owned();
    let mut child = std::process::Command::new(crate::support::BIN)
        .args(["admin", "create-user", "--account", "globex", "--email", "eve@example.com", "--role", "admin", "--db"])
        .arg(&app.db)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), format!("{PASSWORD}\n").as_bytes()).unwrap();
    assert!(child.wait().unwrap().success());
    let mut b = Browser::new(&app);
    b.login("eve@example.com");
    let path = format!("/dashboard/sites/{site}/reports/{rid}");
    for page in [reports_path(&site), path.clone(), format!("{path}/runs/{run}?format=html"), format!("{path}/runs/{run}?format=json")] {
        assert_eq!(b.get(&page).status, 404, "GET {page}");
    }
    let token = b.token("/dashboard/");
    for action in [reports_path(&site), path.clone(), format!("{path}/send"), format!("{path}/delete")] {
        let a = b.post(&action, &weekly_with(&token, &[]));
        assert_eq!(a.status, 404, "POST {action}: {}", a.text);
    }
    assert_eq!(app.get(&format!("/v1/sites/{site}/reports/{rid}/runs")).body["total"], 1, "nothing was sent");
    app.get(&format!("/v1/sites/{site}/reports/{rid}")).expect(200);
}

#[test]
fn the_demo_starts_with_a_weekly_report_and_its_past_runs_sent_nowhere() {
    let app = TestApp::spawn_with(&["--demo", "--rate-limit-api", "0", "--rate-limit-ingest", "0"]);
    let site = {
        let page = app.get("/demo/");
        page.text.split("data-site-id=\"").nth(1).and_then(|r| r.split('"').next()).expect("the demo site's id").to_owned()
    };
    let mut b = Browser::new(&app);
    let a = b.login_as("demo@postern.local", "postern-demo");
    assert_eq!(a.status, 303, "the demo user signs in: {}", a.text);

    let list = b.get(&reports_path(&site));
    list.expect(200);
    assert!(list.text.contains("Weekly numbers"), "the Reports tab lists the demo report:\n{}", list.text);
    let marker = format!("href=\"{}/", reports_path(&site));
    let rid = list.text.split(&marker).nth(1).and_then(|r| r.split('"').next()).expect("a link to the report").to_owned();
    let report_url = format!("{}/{rid}", reports_path(&site));

    // Start-up ran the scheduler: the seeded runs left it nothing to send.
    crate::reports::wait_for_pass(&app);
    let page = b.get(&report_url);
    page.expect(200);
    let facts = page.text.split("<dl class=\"facts\">").nth(1).unwrap().split("</dl>").next().unwrap();
    assert!(facts.contains("demo@postern.local") && facts.contains("Every Monday"), "a weekly e-mail to the demo user: {facts}");
    let runs = table_rows(&page, "runs-table");
    assert_eq!(runs.len(), 4, "four weeks of runs: {runs:?}");
    for run in &runs {
        assert!(run.iter().any(|c| c == "not sent: part of the demo's seeded history"), "no delivery, none failing: {run:?}");
    }
    assert!(!page.text.contains("badge pending") && !page.text.contains("badge failed"));

    // Every run renders: the page, the PDF and the JSON, with figures of the seeded history.
    let run_ids: Vec<String> = page.text.split(&format!("{report_url}/runs/")).skip(1).map(|r| r.split('?').next().unwrap().to_owned()).collect();
    assert!(!run_ids.is_empty());
    let run = &run_ids[0];
    let html = b.get(&format!("{report_url}/runs/{run}?format=html"));
    html.expect(200);
    assert!(html.text.contains("Weekly numbers") && html.text.contains("Sessions"), "{}", html.text);
    let pdf = b.get(&format!("{report_url}/runs/{run}?format=pdf"));
    pdf.expect(200);
    assert!(pdf.text.starts_with("%PDF-"));
    let json = b.get(&format!("{report_url}/runs/{run}?format=json"));
    json.expect(200);
    assert_eq!(json.body["type"], "weekly");
    assert_eq!(json.body["trigger"], "schedule");
    assert!(json.body["weekly"]["kpis"]["sessions"].as_u64().unwrap_or(0) > 1000, "a week of the demo's traffic: {}", json.body);
}

#[test]
fn the_report_form_has_add_and_remove_for_scripts_and_takes_any_number_of_rows_in_one_save() {
    let app = TestApp::spawn();
    create_user(&app, "ann@example.com", "admin");
    let site = id(&app.create_site("news.example.com", "UTC"));
    let mut b = Browser::new(&app);
    b.login("ann@example.com");
    let page = b.get(&reports_path(&site));
    page.expect(200);
    // Hidden until the script shows them; without it the hint about saving stays.
    assert!(page.text.contains("<button type=\"button\" class=\"secondary small\" data-add-recipient hidden>Add recipient</button>"), "{}", page.text);
    assert_eq!(page.text.matches("data-remove-recipient hidden>Remove<span class=\"visually-hidden\"> recipient ").count(), 2);
    assert!(page.text.contains("data-max=\"50\"") && page.text.contains("<small data-without-script>Need more rows?"));

    // What the script adds are more rows of the same fields: five in one save.
    let token = csrf(&page);
    let emails = ["a@example.com", "b@example.com", "c@example.com", "d@example.com", "e@example.com"];
    let mut form = vec![("csrf", token.as_str()), ("name", "Many"), ("type", "daily"), ("time", "07:00"), ("channels", "email"), ("format", "html")];
    for e in &emails {
        form.extend([("recipient_email", *e), ("recipient_role", "reader")]);
    }
    let a = b.post(&reports_path(&site), &form);
    assert_eq!(a.status, 303, "{}", a.text);
    let saved: Vec<String> = api_reports(&app, &site)[0]["recipients"].as_array().unwrap().iter().map(|r| r["email"].as_str().unwrap().to_owned()).collect();
    assert_eq!(saved, emails);
}
