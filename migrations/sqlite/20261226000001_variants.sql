-- Variants (sqlite): a sweep runs every (task, model, variant, trial), so the variant is part
-- of a trial's key. '' is "no variant" (every trial of a sweep without [variants]). SQLite
-- cannot change a primary key in place: the table is rebuilt with every column and row kept.
-- Also: an index for reading a sweep's verdicts by arm and task (trend, sweeps, adaptive rounds).
CREATE TABLE anvil_trials_v2 (
    sweep TEXT NOT NULL,
    task TEXT NOT NULL,
    model TEXT NOT NULL,
    variant TEXT NOT NULL DEFAULT '',
    trial INTEGER NOT NULL,
    -- queued | running | retrying | done | infra_error | cancelled
    state TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    worker TEXT,
    started_at_ms INTEGER,
    finished_at_ms INTEGER,
    last_error TEXT,
    record TEXT,
    pass INTEGER,
    reserved_usd REAL,
    PRIMARY KEY (sweep, task, model, variant, trial)
);
INSERT INTO anvil_trials_v2
    (sweep, task, model, variant, trial, state, attempt, worker, started_at_ms, finished_at_ms,
     last_error, record, pass, reserved_usd)
SELECT sweep, task, model, '', trial, state, attempt, worker, started_at_ms, finished_at_ms,
       last_error, record, pass, reserved_usd
FROM anvil_trials;
DROP TABLE anvil_trials;
ALTER TABLE anvil_trials_v2 RENAME TO anvil_trials;
CREATE INDEX IF NOT EXISTS anvil_trials_state ON anvil_trials (sweep, state);
CREATE INDEX IF NOT EXISTS anvil_trials_verdicts
    ON anvil_trials (sweep, state, model, variant, task, pass);
