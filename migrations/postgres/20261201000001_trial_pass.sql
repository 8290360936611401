-- The verdict of a finished trial as its own column, written with the record, so that counting
-- passes never searches the record's text. 1 passed, 0 failed (a tampered trial is never a
-- pass), NULL not graded (queued, running, infra error, cancelled).
ALTER TABLE anvil_trials ADD COLUMN IF NOT EXISTS pass BIGINT;

-- Trials finished before this column existed: their verdict from their record (a record that
-- is not JSON is left without one).
DO $$
DECLARE
    r RECORD;
    doc JSONB;
BEGIN
    FOR r IN SELECT sweep, task, model, trial, record FROM anvil_trials WHERE record IS NOT NULL LOOP
        BEGIN
            doc := r.record::jsonb;
        EXCEPTION WHEN others THEN
            CONTINUE;
        END;
        IF jsonb_typeof(doc -> 'pass') = 'boolean' AND jsonb_typeof(doc -> 'infra_error') IS DISTINCT FROM 'string' THEN
            UPDATE anvil_trials
            SET pass = CASE
                WHEN (doc ->> 'pass')::boolean
                     AND doc ->> 'check_outcome' IS DISTINCT FROM 'tampered'
                     AND COALESCE(jsonb_array_length(CASE WHEN jsonb_typeof(doc -> 'tamper') = 'array' THEN doc -> 'tamper' END), 0) = 0
                THEN 1 ELSE 0 END
            WHERE sweep = r.sweep AND task = r.task AND model = r.model AND trial = r.trial;
        END IF;
    END LOOP;
END $$;
