-- Version 13: the hot level of each merged index lives in the writer's memory.
--
-- The keys of the hot tables move into the cold ones, and `low` gains `cold`:
-- every row at or below it is in the cold table. The writer rebuilds its hot
-- level from the merged rows above `cold` at start-up
-- (analytics/src/write/tail.rs).

INSERT OR REPLACE INTO session_index (h, seq) SELECT h, seq FROM session_index_hot ORDER BY h, seq;
DROP TABLE session_index_hot;
ALTER TABLE session_index_low ADD COLUMN cold INTEGER NOT NULL DEFAULT 0;
UPDATE session_index_low SET cold = seq;

INSERT OR REPLACE INTO event_id_index (h, seq) SELECT h, seq FROM event_id_index_hot ORDER BY h, seq;
DROP TABLE event_id_index_hot;
ALTER TABLE event_id_index_low ADD COLUMN cold INTEGER NOT NULL DEFAULT 0;
UPDATE event_id_index_low SET cold = seq;
