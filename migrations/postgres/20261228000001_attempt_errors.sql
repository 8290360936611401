-- Earlier attempts of a trial: each attempt that ended in an infrastructure failure and was
-- retried keeps its error here, so the trial's final record lists them (`attempts`) instead of
-- the retry clearing them.
CREATE TABLE IF NOT EXISTS anvil_trial_attempts (
    sweep TEXT NOT NULL,
    task TEXT NOT NULL,
    model TEXT NOT NULL,
    variant TEXT NOT NULL DEFAULT '',
    trial BIGINT NOT NULL,
    attempt BIGINT NOT NULL,
    error TEXT NOT NULL,
    finished_at_ms BIGINT NOT NULL,
    PRIMARY KEY (sweep, task, model, variant, trial, attempt)
);
