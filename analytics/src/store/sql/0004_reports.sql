-- Version 4: report configurations and the runs they produced.
-- Sites are referenced by their public id without a foreign key: a deleted
-- site's rows are purged in batches, while report runs are kept forever.

CREATE TABLE report_configs (
    id          TEXT PRIMARY KEY,
    site_id     TEXT NOT NULL,
    name        TEXT NOT NULL,
    type        TEXT NOT NULL CHECK (type IN ('daily', 'weekly', 'monthly', 'custom')),
    enabled     INTEGER NOT NULL,
    -- Metrics, filters, schedule, recipients, channels and format as JSON.
    spec        TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    -- Deleted configs stay so their runs keep their context.
    deleted_at  INTEGER
);
CREATE INDEX report_configs_site ON report_configs(site_id);

-- One row per generated report. `occurrence` is the local date of the
-- scheduled send (NULL for "send now"): unique per config, it is what makes a
-- scheduled report run exactly once per period, across restarts.
CREATE TABLE report_runs (
    id             TEXT PRIMARY KEY,
    config_id      TEXT NOT NULL,
    site_id        TEXT NOT NULL,
    type           TEXT NOT NULL,
    occurrence     TEXT,
    period_start   TEXT NOT NULL,
    period_end     TEXT NOT NULL,
    trigger        TEXT NOT NULL CHECK (trigger IN ('schedule', 'catch_up', 'manual')),
    scheduled_for  INTEGER,
    created_at     INTEGER NOT NULL,
    content        TEXT NOT NULL,
    -- When the run was handed to the delivery outbox (NULL: not yet).
    enqueued_at    INTEGER
);
CREATE UNIQUE INDEX report_runs_occurrence ON report_runs(config_id, occurrence) WHERE occurrence IS NOT NULL;
CREATE INDEX report_runs_config ON report_runs(config_id, created_at);
CREATE INDEX report_runs_site ON report_runs(site_id, created_at);
