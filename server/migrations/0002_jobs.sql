-- Jobs (see server/src/storage/store/mod.rs, `JobRecord`): the runs uploaded under one name
-- in one scope (an upload token's hash, or '' on an open server), in upload order.
CREATE TABLE training_jobs (
    id TEXT PRIMARY KEY,
    scope TEXT NOT NULL,
    name TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    owner_token_hash TEXT NOT NULL,
    -- The limits each run is held to against the one before (JSON; NULL: the defaults).
    thresholds TEXT,
    -- Runs indexed so far: the next one's place in upload order.
    runs BIGINT NOT NULL DEFAULT 0,
    UNIQUE (scope, name)
);
ALTER TABLE reports ADD COLUMN job_id TEXT, ADD COLUMN job_seq BIGINT;
CREATE INDEX reports_by_job ON reports (job_id, job_seq) WHERE job_id IS NOT NULL;
