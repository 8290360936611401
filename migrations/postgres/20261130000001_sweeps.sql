-- anvil's own tables beside apalis's queue tables (postgres). Times are unix milliseconds.

-- One row per sweep: what was asked for and the digests it was asked with.
CREATE TABLE IF NOT EXISTS anvil_sweeps (
    id TEXT PRIMARY KEY NOT NULL,
    created_at_ms BIGINT NOT NULL,
    -- The sweep spec as JSON: tasks (name, dir, digests), models, trials, retry limit.
    spec TEXT NOT NULL,
    -- sha256 over the task and grader digests: a resumed sweep must match it.
    fingerprint TEXT NOT NULL,
    anvil_git_sha TEXT NOT NULL,
    cancelled BIGINT NOT NULL DEFAULT 0
);

-- One row per (sweep, task, model, trial): its state while queued or running, and its result
-- (the trial record) once finished. Writes are fenced by attempt.
CREATE TABLE IF NOT EXISTS anvil_trials (
    sweep TEXT NOT NULL,
    task TEXT NOT NULL,
    model TEXT NOT NULL,
    trial BIGINT NOT NULL,
    -- queued | running | retrying | done | infra_error | cancelled
    state TEXT NOT NULL,
    attempt BIGINT NOT NULL DEFAULT 0,
    worker TEXT,
    started_at_ms BIGINT,
    finished_at_ms BIGINT,
    last_error TEXT,
    record TEXT,
    PRIMARY KEY (sweep, task, model, trial)
);

CREATE INDEX IF NOT EXISTS anvil_trials_state ON anvil_trials (sweep, state);

-- Workers announce themselves and beat here so `anvil-evals status` can show them.
CREATE TABLE IF NOT EXISTS anvil_workers (
    name TEXT PRIMARY KEY NOT NULL,
    host TEXT NOT NULL,
    pid BIGINT NOT NULL,
    started_at_ms BIGINT NOT NULL,
    last_heartbeat_ms BIGINT NOT NULL,
    stopped BIGINT NOT NULL DEFAULT 0
);
