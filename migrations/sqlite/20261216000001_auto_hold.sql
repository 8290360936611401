-- `anvil auto init` (sqlite): a run made by `init` holds its worker sessions once the contract is
-- accepted, until `anvil auto run` or `resume` releases it. 0 = go on, 1 = hold.
ALTER TABLE auto_runs ADD COLUMN hold_workers INTEGER NOT NULL DEFAULT 0;
