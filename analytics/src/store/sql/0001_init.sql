-- Version 1: accounts, keys, sites, raw events, sessions and hourly rollups.
-- Times are stored as integers: milliseconds since the Unix epoch for instants,
-- whole hours since the epoch (UTC) for rollup keys.

CREATE TABLE accounts (
    id          INTEGER PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    created_at  INTEGER NOT NULL
);

CREATE TABLE users (
    id             INTEGER PRIMARY KEY,
    account_id     INTEGER NOT NULL REFERENCES accounts(id),
    email          TEXT NOT NULL UNIQUE COLLATE NOCASE,
    password_hash  TEXT NOT NULL,
    role           TEXT NOT NULL CHECK (role IN ('admin', 'reader')),
    created_at     INTEGER NOT NULL
);

CREATE TABLE api_keys (
    id            TEXT PRIMARY KEY,
    account_id    INTEGER NOT NULL REFERENCES accounts(id),
    name          TEXT NOT NULL,
    prefix        TEXT NOT NULL,
    secret_hash   BLOB NOT NULL UNIQUE,
    scopes        TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    last_used_at  INTEGER,
    revoked_at    INTEGER
);
CREATE INDEX api_keys_account ON api_keys(account_id);

-- `seq` is the compact key the event tables use; `id` is the public UUID.
CREATE TABLE sites (
    seq                INTEGER PRIMARY KEY,
    id                 TEXT NOT NULL UNIQUE,
    account_id         INTEGER NOT NULL REFERENCES accounts(id),
    name               TEXT NOT NULL,
    domain             TEXT NOT NULL,
    status             TEXT NOT NULL CHECK (status IN ('active', 'paused')),
    timezone           TEXT NOT NULL,
    revenue_per_mille  REAL,
    wall               TEXT NOT NULL,
    created_at         INTEGER NOT NULL,
    deleted_at         INTEGER
);
CREATE INDEX sites_account ON sites(account_id);

-- Raw events, kept for the raw retention period. `occurred_at` is the time the
-- event counts at (the receive time unless a keyed client back-filled it).
CREATE TABLE events (
    seq          INTEGER PRIMARY KEY,
    id           TEXT NOT NULL,
    site         INTEGER NOT NULL,
    session_id   TEXT NOT NULL,
    event_type   INTEGER NOT NULL,
    page_url     TEXT NOT NULL,
    metadata     TEXT,
    country      TEXT NOT NULL,
    client_event_id TEXT,
    occurred_at  INTEGER NOT NULL,
    received_at  INTEGER NOT NULL
);
CREATE INDEX events_site ON events(site, seq);
CREATE INDEX events_site_type ON events(site, event_type, seq);
CREATE UNIQUE INDEX events_client_event_id ON events(site, client_event_id)
    WHERE client_event_id IS NOT NULL;
CREATE INDEX events_occurred ON events(occurred_at);

-- One row per visitor session: the flags it has earned and the rollup row it counts in.
CREATE TABLE sessions (
    site        INTEGER NOT NULL,
    session_id  TEXT NOT NULL,
    first_hour  INTEGER NOT NULL,
    device      INTEGER NOT NULL,
    country     TEXT NOT NULL,
    variant     TEXT NOT NULL,
    forced      INTEGER NOT NULL,
    flags       INTEGER NOT NULL,
    last_seen   INTEGER NOT NULL,
    PRIMARY KEY (site, session_id)
) WITHOUT ROWID;

-- Session counters per site and UTC hour; every session counts in exactly one row.
-- `variant` is '' for sessions without a (non-forced) wall variant.
CREATE TABLE rollup_hourly (
    site         INTEGER NOT NULL,
    hour         INTEGER NOT NULL,
    device       INTEGER NOT NULL,
    country      TEXT NOT NULL,
    variant      TEXT NOT NULL,
    sessions     INTEGER NOT NULL,
    adblock      INTEGER NOT NULL,
    walls        INTEGER NOT NULL,
    dismissed    INTEGER NOT NULL,
    conversions  INTEGER NOT NULL,
    -- Sessions that both saw the wall and converted: the A/B numerator.
    wall_conversions INTEGER NOT NULL,
    PRIMARY KEY (site, hour, device, country, variant)
) WITHOUT ROWID;

-- Event counts per site, UTC hour of the event, type, and the session's device and country.
CREATE TABLE event_counts_hourly (
    site        INTEGER NOT NULL,
    hour        INTEGER NOT NULL,
    event_type  INTEGER NOT NULL,
    device      INTEGER NOT NULL,
    country     TEXT NOT NULL,
    events      INTEGER NOT NULL,
    PRIMARY KEY (site, hour, event_type, device, country)
) WITHOUT ROWID;

-- Narrow copies of rollup_hourly that the dashboard, the timeline and A/B read,
-- so their cost follows the hours in the period, not the spread of countries.
CREATE TABLE rollup_device_hourly (
    site         INTEGER NOT NULL,
    hour         INTEGER NOT NULL,
    device       INTEGER NOT NULL,
    sessions     INTEGER NOT NULL,
    adblock      INTEGER NOT NULL,
    walls        INTEGER NOT NULL,
    dismissed    INTEGER NOT NULL,
    conversions  INTEGER NOT NULL,
    wall_conversions INTEGER NOT NULL,
    PRIMARY KEY (site, hour, device)
) WITHOUT ROWID;

CREATE TABLE rollup_variant_hourly (
    site         INTEGER NOT NULL,
    hour         INTEGER NOT NULL,
    variant      TEXT NOT NULL,
    walls        INTEGER NOT NULL,
    wall_conversions INTEGER NOT NULL,
    PRIMARY KEY (site, hour, variant)
) WITHOUT ROWID;

-- How many raw events each site holds per type: the events list's `total`,
-- kept exact by the writer (inserts) and the retention job (deletes).
CREATE TABLE raw_event_totals (
    site        INTEGER NOT NULL,
    event_type  INTEGER NOT NULL,
    events      INTEGER NOT NULL,
    PRIMARY KEY (site, event_type)
) WITHOUT ROWID;
