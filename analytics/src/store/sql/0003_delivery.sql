-- Version 3: integrations, the durable delivery outbox with its attempts, and
-- the state alerts keep so each condition fires once.

-- Where a site's notifications go: a Slack-type incoming webhook, a signed
-- custom webhook (`target` is the URL) or an e-mail address (`target` is the
-- address). `events` is a JSON array of the event names it receives. Deleted integrations are
-- kept (with `deleted_at`) so their delivery history stays readable.
CREATE TABLE integrations (
    seq         INTEGER PRIMARY KEY,
    id          TEXT NOT NULL UNIQUE,
    site        INTEGER NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('email', 'slack', 'webhook')),
    name        TEXT NOT NULL,
    target      TEXT NOT NULL,
    secret      TEXT,
    events      TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    deleted_at  INTEGER
);
CREATE INDEX integrations_site ON integrations(site);

-- One row per enqueued notification: its dedupe key makes a second enqueue a no-op.
CREATE TABLE notifications (
    dedupe_key  TEXT PRIMARY KEY,
    site        INTEGER NOT NULL,
    event       TEXT NOT NULL,
    created_at  INTEGER NOT NULL
) WITHOUT ROWID;

-- One row per message to send: an e-mail to one recipient, or one POST to one
-- integration. `payload` is the JSON the sender needs; `id` is the public
-- delivery id (the webhook's Postern-Delivery header, stable across retries).
CREATE TABLE outbox (
    seq              INTEGER PRIMARY KEY,
    id               TEXT NOT NULL UNIQUE,
    site             INTEGER NOT NULL,
    dedupe_key       TEXT NOT NULL,
    event            TEXT NOT NULL,
    channel          TEXT NOT NULL CHECK (channel IN ('email', 'slack', 'webhook')),
    integration      INTEGER REFERENCES integrations(seq),
    recipient        TEXT NOT NULL,
    payload          TEXT NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  INTEGER NOT NULL,
    created_at       INTEGER NOT NULL,
    finished_at      INTEGER,
    last_error       TEXT
);
CREATE INDEX outbox_pending ON outbox(next_attempt_at) WHERE state = 'pending';
CREATE INDEX outbox_site ON outbox(site, seq);

CREATE TABLE outbox_attachments (
    outbox        INTEGER NOT NULL REFERENCES outbox(seq),
    position      INTEGER NOT NULL,
    filename      TEXT NOT NULL,
    content_type  TEXT NOT NULL,
    bytes         BLOB NOT NULL,
    PRIMARY KEY (outbox, position)
) WITHOUT ROWID;

-- Every attempt to send an outbox row: `status` is the HTTP status or SMTP
-- reply code when there was one; `error` says what went wrong.
CREATE TABLE delivery_attempts (
    outbox      INTEGER NOT NULL REFERENCES outbox(seq),
    attempt     INTEGER NOT NULL,
    started_at  INTEGER NOT NULL,
    latency_ms  INTEGER NOT NULL,
    status      INTEGER,
    outcome     TEXT NOT NULL CHECK (outcome IN ('delivered', 'retry', 'failed')),
    error       TEXT,
    PRIMARY KEY (outbox, attempt)
) WITHOUT ROWID;

-- Per site and alert: whether its condition currently holds, and what it was
-- last fired for, so an alert fires on the transition, not on every check.
CREATE TABLE alert_state (
    site        INTEGER NOT NULL,
    alert       TEXT NOT NULL,
    active      INTEGER NOT NULL,
    fired_key   TEXT,
    changed_at  INTEGER NOT NULL,
    PRIMARY KEY (site, alert)
) WITHOUT ROWID;
