-- Version 2: what nodes kept in their own memory and must now share, so that
-- any node can serve any request (DESIGN §12): API-key rate windows, sign-in
-- attempts, one-time dashboard messages and wall-preview drafts. Times are
-- Unix seconds.

-- Counted on every request with a key: UNLOGGED spares each count the WAL,
-- and a server crash that empties the table only starts the windows afresh.
CREATE UNLOGGED TABLE rate_windows (
    bucket     TEXT PRIMARY KEY,
    expires_at BIGINT NOT NULL,
    count      BIGINT NOT NULL,
    took       BIGINT NOT NULL
);
CREATE INDEX rate_windows_expiry ON rate_windows (expires_at);

CREATE TABLE sign_in_attempts (
    bucket     TEXT PRIMARY KEY,
    expires_at BIGINT NOT NULL,
    count      BIGINT NOT NULL,
    took       BIGINT NOT NULL
);
CREATE INDEX sign_in_attempts_expiry ON sign_in_attempts (expires_at);

-- At most one message per session (the SHA-256 of its token), sealed with a
-- key only the session's cookie yields.
CREATE TABLE dashboard_flashes (
    session    BYTEA PRIMARY KEY,
    page       TEXT NOT NULL,
    sealed     BYTEA NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX dashboard_flashes_expiry ON dashboard_flashes (expires_at);

CREATE TABLE wall_drafts (
    token      BYTEA PRIMARY KEY,
    site       TEXT NOT NULL,
    session    BYTEA NOT NULL,
    wall       TEXT NOT NULL,
    seq        BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX wall_drafts_session ON wall_drafts (session, seq);
CREATE INDEX wall_drafts_expiry ON wall_drafts (expires_at);
