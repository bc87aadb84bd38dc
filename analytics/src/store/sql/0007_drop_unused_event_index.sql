-- Version 7: drop `events_site_type`.
--
-- No query uses it (the events list filters its type while it walks
-- `events_site` in `seq` order, as EXPLAIN QUERY PLAN shows), and it cost
-- every insert one more index entry, on one of five leaf pages per commit.

DROP INDEX events_site_type;
