-- Version 5: sessions stored in the order the collector first saw them.
--
-- Session ids are random, so a table keyed by them takes every new session at
-- a random B-tree page: one more page to write, sync and checkpoint per event.
-- Sessions are now appended (`seq` order) and found by id through
-- `session_index`, which the writer fills slice by slice (a slice is the
-- sessions whose id starts with the same two bytes), many sessions at a time,
-- so each index page it writes takes many entries. Sessions not yet in the
-- index are all in the writer's memory; at start-up it finds them again from
-- `session_index_low` and `session_index_marks` (see analytics/src/write/sessions.rs).

CREATE TABLE sessions_v2 (
    seq         INTEGER PRIMARY KEY,
    site        INTEGER NOT NULL,
    session_id  TEXT NOT NULL,
    first_hour  INTEGER NOT NULL,
    device      INTEGER NOT NULL,
    country     TEXT NOT NULL,
    variant     TEXT NOT NULL,
    forced      INTEGER NOT NULL,
    flags       INTEGER NOT NULL,
    last_seen   INTEGER NOT NULL
);
INSERT INTO sessions_v2 (site, session_id, first_hour, device, country, variant, forced, flags, last_seen)
    SELECT site, session_id, first_hour, device, country, variant, forced, flags, last_seen
    FROM sessions ORDER BY last_seen;
DROP TABLE sessions;
ALTER TABLE sessions_v2 RENAME TO sessions;
-- For purging a deleted site's sessions; appended to like the table.
CREATE INDEX sessions_site ON sessions(site, seq);

-- Where to find a session by id, for every session up to its slice's mark.
CREATE TABLE session_index (
    session_id  TEXT NOT NULL,
    site        INTEGER NOT NULL,
    seq         INTEGER NOT NULL,
    PRIMARY KEY (session_id, site)
) WITHOUT ROWID;
INSERT INTO session_index (session_id, site, seq) SELECT session_id, site, seq FROM sessions;

-- Per slice (first two bytes of the session id, as an integer): the largest
-- `seq` merged into the index. A session with a larger `seq` is not indexed yet.
CREATE TABLE session_index_marks (
    slice  INTEGER PRIMARY KEY,
    seq    INTEGER NOT NULL
);

-- Every session with a `seq` at or below this one is in the index.
CREATE TABLE session_index_low (seq INTEGER NOT NULL);
INSERT INTO session_index_low (seq) SELECT coalesce(max(seq), 0) FROM sessions;
