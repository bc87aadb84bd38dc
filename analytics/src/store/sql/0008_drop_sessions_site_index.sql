-- Version 8: drop `sessions_site`.
--
-- It served only to purge a deleted site's sessions, and it cost every new
-- session one more index entry: about three of the 28 pages a group commit
-- writes under load, because SQLite rebalances the last leaves of an index
-- that is appended to. The purge now walks the sessions in arrival order, a
-- window per write (analytics/src/retention.rs).

DROP INDEX sessions_site;
