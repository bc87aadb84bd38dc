-- Version 9: raw retention finds old events in arrival order; `events_occurred` dropped.
--
-- An event occurs when it arrives unless a keyed client back-dates it, so the
-- oldest events are the first rows in `seq` order: retention reads them from
-- the head of the table. `events_occurred` cost every insert about three
-- pages per group commit (SQLite rebalances the last leaves of an index it
-- appends to); only back-dated events, few and sent by servers, still get an
-- index entry, in `events_backdated`.

DROP INDEX events_occurred;
CREATE INDEX events_backdated ON events(occurred_at) WHERE occurred_at < received_at;
