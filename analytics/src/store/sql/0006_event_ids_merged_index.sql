-- Version 6: client event ids found through an index merged slice by slice.
--
-- The SDK sends a random `event_id` with every event, so the unique index on
-- (site, client_event_id) took every event at a random B-tree page, as the
-- session key did before version 5. The ids now go through the same scheme as
-- sessions (analytics/src/write/tail.rs): the writer keeps the ids not yet
-- merged in memory and merges them into `event_id_index` many at a time.

CREATE TABLE event_id_index (
    event_id  TEXT NOT NULL,
    site      INTEGER NOT NULL,
    seq       INTEGER NOT NULL,
    PRIMARY KEY (event_id, site)
) WITHOUT ROWID;
INSERT INTO event_id_index (event_id, site, seq)
    SELECT client_event_id, site, seq FROM events WHERE client_event_id IS NOT NULL;

CREATE TABLE event_id_index_marks (
    slice  INTEGER PRIMARY KEY,
    seq    INTEGER NOT NULL
);

CREATE TABLE event_id_index_low (seq INTEGER NOT NULL);
INSERT INTO event_id_index_low (seq) SELECT coalesce(max(seq), 0) FROM events;

DROP INDEX events_client_event_id;
