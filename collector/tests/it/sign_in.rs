//! Signing in under attack: attempts counted before their password is
//! checked (a parallel burst gets no more checks than the limit), a lock-out
//! that holds one place only, password checks a few at a time, and `Secure`
//! cookies behind https.

use std::sync::{Arc, Barrier};
use std::time::Duration;

use reqwest::blocking::Client;
use reqwest::redirect::Policy;

use crate::dashboard::{create_user, csrf, Browser, PASSWORD};
use crate::support::*;

const BURST: usize = 50;

/// A counter of `GET /metrics`.
#[track_caller]
fn counter(app: &TestApp, name: &str) -> u64 {
    let text = app.send(app.request(reqwest::Method::GET, "/metrics")).text;
    let line = text.lines().find(|l| l.split(' ').next() == Some(name)).unwrap_or_else(|| panic!("no {name} in:\n{text}"));
    line.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64
}

/// The login form's CSRF token and the cookie carrying it.
fn login_token(app: &TestApp) -> (String, String) {
    let page = app.send(app.request(reqwest::Method::GET, "/dashboard/login"));
    page.expect(200);
    let token = csrf(&page);
    (format!("postern_login={token}"), token)
}

/// One sign-in from `address` (sent as `X-Forwarded-For`): (status, Retry-After, body).
fn sign_in(client: &Client, app: &TestApp, login: &(String, String), address: &str, email: &str, password: &str) -> (u16, Option<String>, String) {
    let res = client
        .post(app.url("/dashboard/login"))
        .header("Cookie", &login.0)
        .header("X-Forwarded-For", address)
        .form(&[("csrf", login.1.as_str()), ("email", email), ("password", password), ("next", "/dashboard/")])
        .send()
        .expect("HTTP request");
    let status = res.status().as_u16();
    let retry_after = res.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
    (status, retry_after, res.text().unwrap_or_default())
}

/// `BURST` sign-ins at once, the i-th with `attempt(i)` = (address, e-mail, password).
fn burst(app: &TestApp, attempt: impl Fn(usize) -> (String, String, String)) -> Vec<(u16, Option<String>, String)> {
    let login = Arc::new(login_token(app));
    let gate = Arc::new(Barrier::new(BURST));
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..BURST)
            .map(|i| {
                let (login, gate, (address, email, password)) = (login.clone(), gate.clone(), attempt(i));
                scope.spawn(move || {
                    let client = Client::builder().redirect(Policy::none()).timeout(Duration::from_secs(60)).build().unwrap();
                    gate.wait();
                    sign_in(&client, app, &login, &address, &email, &password)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    })
}

fn spawn() -> TestApp {
    TestApp::spawn_with(&["--rate-limit-api", "0", "--rate-limit-ingest", "0", "--client-ip-header", "X-Forwarded-For"])
}

#[test]
fn a_burst_of_parallel_guesses_gets_no_more_password_checks_than_the_limit() {
    let app = spawn();
    create_user(&app, "ann@example.com", "admin");
    let before = counter(&app, "postern_password_verifications_total");
    let answers = burst(&app, |_| ("203.0.113.7".into(), "ann@example.com".into(), "guess".into()));
    let checked = counter(&app, "postern_password_verifications_total") - before;
    let count = |s: u16| answers.iter().filter(|a| a.0 == s).count();
    eprintln!("{BURST} parallel wrong passwords: {} × 401, {} × 429, {} × 503; {checked} checked", count(401), count(429), count(503));
    assert_eq!(count(401) + count(429) + count(503), BURST, "only 401, 429 and 503: {:?}", answers.iter().map(|a| a.0).collect::<Vec<_>>());
    assert_eq!(count(401) as u64, checked, "every 401 is one password check, and nothing else was checked");
    assert!((1..=5).contains(&checked), "at most 5 checks for one e-mail from one address, not {checked}");
    for (status, retry_after, body) in &answers {
        if *status == 429 {
            assert!(retry_after.as_deref().and_then(|s| s.parse::<u64>().ok()).is_some_and(|s| s > 0 && s <= 900), "{retry_after:?}");
            assert!(body.contains("Too many failed sign-ins"), "{body}");
        }
    }

    // Whatever the burst left (a check turned away with 503 is given back), five guesses in all, then none.
    let client = Client::builder().redirect(Policy::none()).build().unwrap();
    let login = login_token(&app);
    let mut guesses = checked;
    loop {
        let (status, ..) = sign_in(&client, &app, &login, "203.0.113.7", "ann@example.com", "guess");
        match status {
            401 => guesses += 1,
            429 => break,
            other => panic!("unexpected {other}"),
        }
        assert!(guesses <= 5, "a sixth guess was checked");
    }
    assert_eq!(guesses, 5);
    assert_eq!(counter(&app, "postern_password_verifications_total") - before, 5);

    // Locked out from there, even with the right password...
    let (status, ..) = sign_in(&client, &app, &login, "203.0.113.7", "ann@example.com", PASSWORD);
    assert_eq!(status, 429, "the right password is refused from the guessing address too");
    // ...but not from anywhere else: the Admin signs in from another address.
    let (status, ..) = sign_in(&client, &app, &login, "198.51.100.20", "ann@example.com", PASSWORD);
    assert_eq!(status, 303, "another address is not locked out");
    assert_eq!(counter(&app, "postern_password_verifications_total") - before, 6, "a refused attempt checks no password");
}

#[test]
fn an_ipv6_client_is_throttled_by_its_64() {
    let app = spawn();
    create_user(&app, "ann@example.com", "admin");
    let client = Client::builder().redirect(Policy::none()).build().unwrap();
    let login = login_token(&app);
    for i in 1..=5 {
        let (status, ..) = sign_in(&client, &app, &login, &format!("2001:db8:1:2::{i}"), "ann@example.com", "guess");
        assert_eq!(status, 401, "guess {i}");
    }
    let (status, ..) = sign_in(&client, &app, &login, "2001:db8:1:2:ffff:ffff:ffff:ffff", "ann@example.com", PASSWORD);
    assert_eq!(status, 429, "another address of the same /64 is the same place");
    let (status, ..) = sign_in(&client, &app, &login, "2001:db8:1:3::1", "ann@example.com", PASSWORD);
    assert_eq!(status, 303, "the next /64 is another place");
}

#[test]
fn password_checks_beyond_the_slots_answer_503_and_check_nothing() {
    let app = spawn();
    let before = (counter(&app, "postern_password_verifications_total"), counter(&app, "postern_password_checks_refused_total"));
    // Unknown e-mails from distinct addresses: no throttle applies, every attempt wants a check.
    let answers = burst(&app, |i| (format!("10.9.{}.{}", i / 200, i % 200 + 1), format!("nobody{i}@example.com"), "guess".into()));
    let checked = counter(&app, "postern_password_verifications_total") - before.0;
    let turned_away = counter(&app, "postern_password_checks_refused_total") - before.1;
    let count = |s: u16| answers.iter().filter(|a| a.0 == s).count() as u64;
    eprintln!("{BURST} parallel sign-ins of unknown e-mails: {} × 401, {} × 503", count(401), count(503));
    assert_eq!(count(401) + count(503), BURST as u64, "only 401 and 503: {:?}", answers.iter().map(|a| a.0).collect::<Vec<_>>());
    assert_eq!((count(401), count(503)), (checked, turned_away), "each 401 was checked, each 503 was not");
    // Fifty requests arrive far faster than one argon2 check ends: more than two per CPU at once
    // would be checked without the slots.
    assert!(turned_away > 0, "{BURST} simultaneous checks were all let through");
    for (status, retry_after, body) in answers.iter().filter(|a| a.0 == 503) {
        assert_eq!((*status, retry_after.as_deref()), (503, Some("1")));
        assert!(body.contains("Try again in a few seconds") && body.contains("name=\"csrf\""), "the form again, saying so: {body}");
    }
}

#[test]
fn dashboard_cookies_are_secure_when_served_over_https() {
    let set_cookies = |a: &Answer| a.headers.get_all("set-cookie").iter().map(|v| v.to_str().unwrap().to_owned()).collect::<Vec<_>>();
    let plain = TestApp::spawn();
    let page = plain.send(plain.request(reqwest::Method::GET, "/dashboard/login"));
    assert!(set_cookies(&page).iter().all(|c| !c.contains("Secure")), "plain http: {:?}", set_cookies(&page));
    let proxied = plain.send(plain.request(reqwest::Method::GET, "/dashboard/login").header("X-Forwarded-Proto", "https"));
    assert!(set_cookies(&proxied).iter().all(|c| c.ends_with("; Secure")), "behind a TLS proxy: {:?}", set_cookies(&proxied));

    let app = TestApp::spawn_with(&["--rate-limit-api", "0", "--public-url", "https://postern.example.com"]);
    create_user(&app, "ann@example.com", "admin");
    let page = app.send(app.request(reqwest::Method::GET, "/dashboard/login"));
    let login = set_cookies(&page);
    assert!(!login.is_empty() && login.iter().all(|c| c.ends_with("; Secure")), "{login:?}");
    let mut b = Browser::new(&app);
    let a = b.login_as("ann@example.com", PASSWORD);
    assert_eq!(a.status, 303, "{}", a.text);
    let session = set_cookies(&a).into_iter().find(|c| c.starts_with("postern_session=")).expect("a session cookie");
    assert!(session.contains("HttpOnly") && session.ends_with("; Secure"), "{session}");
    let token = b.token("/dashboard/");
    let out = b.post("/dashboard/logout", &[("csrf", &token)]);
    assert!(set_cookies(&out).iter().all(|c| c.ends_with("; Secure")), "{:?}", set_cookies(&out));
}
