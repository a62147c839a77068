-- The report index of a shared store (see server/src/storage/store/postgres.rs): one row per report,
-- its lifecycle, and the job-queue columns ingest workers claim it by.
CREATE TABLE reports (
    id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT,
    error TEXT,
    files TEXT NOT NULL,
    delete_token_hash TEXT NOT NULL,
    meta TEXT,
    -- Where the report's published data lives in the object store (NULL: none yet).
    data_prefix TEXT,
    -- The worker holding the ingest job, until when, and how many times it was claimed.
    lease_owner TEXT,
    lease_until TIMESTAMPTZ,
    attempts INTEGER NOT NULL DEFAULT 0,
    -- Expired reports whose objects were removed (the row stays: the link answers 410).
    purged BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX reports_jobs ON reports (state, created_at) WHERE state IN ('queued', 'processing');
CREATE INDEX reports_expiry ON reports (expires_at) WHERE expires_at IS NOT NULL;
