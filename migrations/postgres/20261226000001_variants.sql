-- Variants (postgres): a sweep runs every (task, model, variant, trial), so the variant is part
-- of a trial's key. '' is "no variant" (every trial of a sweep without [variants]).
ALTER TABLE anvil_trials ADD COLUMN IF NOT EXISTS variant TEXT NOT NULL DEFAULT '';
ALTER TABLE anvil_trials DROP CONSTRAINT IF EXISTS anvil_trials_pkey;
ALTER TABLE anvil_trials ADD PRIMARY KEY (sweep, task, model, variant, trial);
-- Reading a sweep's verdicts by arm and task (trend, sweeps, adaptive rounds).
CREATE INDEX IF NOT EXISTS anvil_trials_verdicts
    ON anvil_trials (sweep, state, model, variant, task, pass);
