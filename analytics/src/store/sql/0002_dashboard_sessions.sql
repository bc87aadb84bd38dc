-- Dashboard login sessions. Only the SHA-256 of the cookie's token is kept,
-- so a copy of the database does not let anyone in.
CREATE TABLE dashboard_sessions (
    token_hash  BLOB PRIMARY KEY,
    user_id     INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    csrf_token  TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
) WITHOUT ROWID;

CREATE INDEX dashboard_sessions_expiry ON dashboard_sessions (expires_at);
