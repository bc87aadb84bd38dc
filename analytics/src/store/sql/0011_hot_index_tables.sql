-- Version 11: a small hot table in front of each merged index.
--
-- The writer merges its tail of new keys into the hot table, and moves the
-- hot table's keys on into the big one (now the cold table) a sorted chunk at
-- a time (analytics/src/write/tail.rs). A key is in the tail, the hot table
-- or the cold table; the marks say which rows are in either table.

CREATE TABLE session_index_hot (
    session_id  TEXT NOT NULL,
    site        INTEGER NOT NULL,
    seq         INTEGER NOT NULL,
    PRIMARY KEY (session_id, site)
) WITHOUT ROWID;

CREATE TABLE event_id_index_hot (
    event_id  TEXT NOT NULL,
    site      INTEGER NOT NULL,
    seq       INTEGER NOT NULL,
    PRIMARY KEY (event_id, site)
) WITHOUT ROWID;
