-- Version 14: a site may keep the utm_* parameters of its page URLs (every
-- other part of the query string, and the fragment, is never stored), and
-- settled outbox rows are found by when they settled, for their retention.
ALTER TABLE sites ADD COLUMN keep_utm INTEGER NOT NULL DEFAULT 0;

CREATE INDEX outbox_settled ON outbox(finished_at) WHERE state <> 'pending';
