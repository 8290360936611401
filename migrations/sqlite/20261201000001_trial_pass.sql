-- The verdict of a finished trial as its own column, written with the record, so that counting
-- passes never searches the record's text. 1 passed, 0 failed (a tampered trial is never a
-- pass), NULL not graded (queued, running, infra error, cancelled).
ALTER TABLE anvil_trials ADD COLUMN pass INTEGER;

-- Trials finished before this column existed: their verdict from their record.
UPDATE anvil_trials
SET pass = CASE json_extract(record, '$.pass')
    WHEN 1 THEN CASE
        WHEN json_extract(record, '$.check_outcome') = 'tampered' THEN 0
        WHEN json_array_length(record, '$.tamper') > 0 THEN 0
        ELSE 1 END
    WHEN 0 THEN 0
    END
WHERE record IS NOT NULL AND json_valid(record) AND json_extract(record, '$.infra_error') IS NULL;
