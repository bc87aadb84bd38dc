-- Version 10: the rollup journal.
--
-- Under heavy load the writer appends each group's rollup deltas here, one row
-- per commit, instead of updating the five rollup and count tables (a page
-- each per commit); a later group adds them up into those tables and empties
-- the journal, within 100 ms (analytics/src/write/rollups.rs).

CREATE TABLE rollup_journal (
    seq     INTEGER PRIMARY KEY,
    deltas  TEXT NOT NULL
);
