-- Version 15: the state that PostgreSQL's nodes share (DESIGN §12), kept in
-- the same tables here so both engines answer one API: API-key rate windows,
-- sign-in attempts, one-time dashboard messages and wall-preview drafts.
-- Times are Unix seconds.

-- The collector counts here only when nodes share the database: alone on
-- its file it counts in memory, sparing the writer a row per API request.
CREATE TABLE rate_windows (
    bucket     TEXT PRIMARY KEY,
    expires_at INTEGER NOT NULL,
    count      INTEGER NOT NULL,
    took       INTEGER NOT NULL
);
CREATE INDEX rate_windows_expiry ON rate_windows (expires_at);

CREATE TABLE sign_in_attempts (
    bucket     TEXT PRIMARY KEY,
    expires_at INTEGER NOT NULL,
    count      INTEGER NOT NULL,
    took       INTEGER NOT NULL
);
CREATE INDEX sign_in_attempts_expiry ON sign_in_attempts (expires_at);

-- At most one message per session (the SHA-256 of its token), sealed with a
-- key only the session's cookie yields.
CREATE TABLE dashboard_flashes (
    session    BLOB PRIMARY KEY,
    page       TEXT NOT NULL,
    sealed     BLOB NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX dashboard_flashes_expiry ON dashboard_flashes (expires_at);

CREATE TABLE wall_drafts (
    token      BLOB PRIMARY KEY,
    site       TEXT NOT NULL,
    session    BLOB NOT NULL,
    wall       TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX wall_drafts_session ON wall_drafts (session, seq);
CREATE INDEX wall_drafts_expiry ON wall_drafts (expires_at);
