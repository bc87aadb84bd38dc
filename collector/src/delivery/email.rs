//! E-mail over SMTP (lettre): an HTML part with its plain-text alternative,
//! and the attachments, as one message per recipient.

use std::time::Duration;

use analytics::outbox::{self, Channel, NewDelivery};
use lettre::message::header::ContentType;
use lettre::message::{Attachment, Mailbox, MultiPart, SinglePart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use serde::{Deserialize, Serialize};

use super::worker::Failure;
use super::Notification;
use crate::config::{DeliveryConfig, SmtpTls};
use crate::html;

/// What an e-mail row of the outbox stores (the attachments have their own table).
#[derive(Serialize, Deserialize)]
struct Payload {
    subject: String,
    html: String,
    text: String,
}

pub(super) fn delivery(e: &super::Email, integration: Option<i64>) -> NewDelivery {
    let payload = Payload { subject: e.subject.clone(), html: e.html.clone(), text: e.text.clone() };
    NewDelivery {
        channel: Channel::Email,
        integration,
        recipient: e.to.clone(),
        payload: serde_json::to_string(&payload).unwrap_or_default(),
        attachments: e
            .attachments
            .iter()
            .map(|a| outbox::Attachment { filename: a.filename.clone(), content_type: a.content_type.clone(), bytes: a.bytes.clone() })
            .collect(),
    }
}

/// The e-mail an e-mail integration gets for a notification: its text and
/// summary, as HTML and as plain text.
pub(super) fn from_notification(n: &Notification, to: &str) -> super::Email {
    let mut text = format!("{}\n", n.text);
    let mut html = format!("<!doctype html><html><body><h1>{}</h1><p>{}</p>", html::escape(&n.subject), html::escape(&n.text));
    if !n.summary.is_empty() {
        html.push_str("<table>");
        text.push('\n');
        for (label, value) in &n.summary {
            text.push_str(&format!("{label}: {value}\n"));
            html.push_str(&format!("<tr><th align=\"left\">{}</th><td>{}</td></tr>", html::escape(label), html::escape(value)));
        }
        html.push_str("</table>");
    }
    html.push_str("</body></html>");
    super::Email { to: to.to_owned(), subject: n.subject.clone(), html, text, attachments: Vec::new() }
}

/// How long one SMTP conversation may take.
const SMTP_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Mailer {
    transport: Option<AsyncSmtpTransport<Tokio1Executor>>,
    from: Mailbox,
}

impl Mailer {
    pub fn new(c: &DeliveryConfig) -> anyhow::Result<Mailer> {
        let from: Mailbox = c.smtp_from.parse().map_err(|e| anyhow::anyhow!("smtp_from {:?} is not an address: {e}", c.smtp_from))?;
        let transport = match &c.smtp_host {
            None => None,
            Some(host) => {
                let tls = match c.smtp_tls {
                    SmtpTls::None => Tls::None,
                    SmtpTls::StartTls => Tls::Required(TlsParameters::new(host.clone())?),
                    SmtpTls::Tls => Tls::Wrapper(TlsParameters::new(host.clone())?),
                };
                let mut b = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host.as_str())
                    .port(c.smtp_port)
                    .tls(tls)
                    .timeout(Some(SMTP_TIMEOUT));
                if let Some(user) = &c.smtp_username {
                    let password = c.smtp_password.as_ref().map(|p| p.0.clone()).unwrap_or_default();
                    b = b.credentials(Credentials::new(user.clone(), password));
                }
                Some(b.build())
            }
        };
        Ok(Mailer { transport, from })
    }

    /// Sends one outbox row; the Message-ID is the delivery id, so a receiver
    /// can tell a retry of the same message apart from a new one.
    pub async fn send(&self, row: &outbox::Pending) -> Result<u16, Failure> {
        let Some(transport) = &self.transport else {
            return Err(Failure::retry(None, "no SMTP server is configured (smtp_host)"));
        };
        let message = self.build(row)?;
        match transport.send(message).await {
            Ok(response) => Ok(u16::from(response.code())),
            Err(e) => {
                let status = e.status().map(u16::from);
                if e.is_permanent() {
                    Err(Failure::permanent(status, format!("SMTP refused the message: {e}")))
                } else {
                    Err(Failure::retry(status, format!("SMTP: {e}")))
                }
            }
        }
    }

    fn build(&self, row: &outbox::Pending) -> Result<Message, Failure> {
        let p: Payload = serde_json::from_str(&row.payload).map_err(|e| Failure::permanent(None, format!("corrupt e-mail payload: {e}")))?;
        let to: Mailbox = row.recipient.parse().map_err(|e| Failure::permanent(None, format!("invalid recipient: {e}")))?;
        let alternative = MultiPart::alternative_plain_html(p.text, p.html);
        let body = if row.attachments.is_empty() {
            alternative
        } else {
            let mut mixed = MultiPart::mixed().multipart(alternative);
            for a in &row.attachments {
                let content_type = ContentType::parse(&a.content_type).unwrap_or(ContentType::parse("application/octet-stream").expect("a valid type"));
                let part: SinglePart = Attachment::new(a.filename.clone()).body(a.bytes.clone(), content_type);
                mixed = mixed.singlepart(part);
            }
            mixed
        };
        Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(p.subject)
            .message_id(Some(format!("<{}@postern>", row.id)))
            .multipart(body)
            .map_err(|e| Failure::permanent(None, format!("the e-mail could not be built: {e}")))
    }
}
