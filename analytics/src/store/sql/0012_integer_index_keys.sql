-- Version 12: the index tables hold a 64-bit hash of (site, key) instead of
-- the key's text.
--
-- An entry is (h, seq): h = SipHash-1-3 of (site, session id or client event
-- id) under this store's random key (analytics/src/write/key.rs), seq the row
-- it names. INTEGER keys keep SQLite on its fast comparator and make an entry
-- a third of the size. Two keys may share a hash: the writer compares the
-- row's own (site, key) after a hit.
--
-- Every row is indexed again, into the cold tables, sorted (so the rebuild
-- appends); the tails start empty (marks cleared, `low` at the last row).

CREATE TABLE index_hash_key (k0 INTEGER NOT NULL, k1 INTEGER NOT NULL);
INSERT INTO index_hash_key (k0, k1) VALUES (random(), random());

DROP TABLE session_index;
DROP TABLE session_index_hot;
CREATE TABLE session_index (h INTEGER NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (h, seq)) WITHOUT ROWID;
CREATE TABLE session_index_hot (h INTEGER NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (h, seq)) WITHOUT ROWID;
INSERT INTO session_index (h, seq)
    SELECT index_key(k.k0, k.k1, s.site, s.session_id), s.seq FROM sessions s, index_hash_key k ORDER BY 1, 2;
DELETE FROM session_index_marks;
UPDATE session_index_low SET seq = (SELECT coalesce(max(seq), 0) FROM sessions);

DROP TABLE event_id_index;
DROP TABLE event_id_index_hot;
CREATE TABLE event_id_index (h INTEGER NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (h, seq)) WITHOUT ROWID;
CREATE TABLE event_id_index_hot (h INTEGER NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (h, seq)) WITHOUT ROWID;
INSERT INTO event_id_index (h, seq)
    SELECT index_key(k.k0, k.k1, e.site, e.client_event_id), e.seq FROM events e, index_hash_key k
    WHERE e.client_event_id IS NOT NULL ORDER BY 1, 2;
DELETE FROM event_id_index_marks;
UPDATE event_id_index_low SET seq = (SELECT coalesce(max(seq), 0) FROM events);
