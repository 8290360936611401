-- What anvil_sweeps.fingerprint is. The comment beside the column in 20261130000001_sweeps.sql
-- ("sha256 over the task and grader digests") is wrong, and it stays there: sqlx checksums
-- every applied migration, so editing that file would stop every existing queue from opening.
-- The correct description is recorded on the column itself.
COMMENT ON COLUMN anvil_sweeps.fingerprint IS
    'sha256 (hex) of the sweep''s identity as JSON: each task''s name with its digests (task.toml, repo/, grader/, dependencies), the model names, each model''s pinned configuration with its digest, and the trial count (not the attempt limit, which a resumed sweep may change). A resumed sweep must match it. See SweepSpec::fingerprint.';
