-- A sweep's hard budget (sqlite), held across every worker: each trial reserves its share
-- before its agent runs (one conditional UPDATE: admitted only if it fits), and settles it with
-- the trial's cost afterwards. A reservation a dead worker never settled is kept as spent.
CREATE TABLE IF NOT EXISTS anvil_sweep_budgets (
    sweep TEXT PRIMARY KEY NOT NULL,
    max_usd REAL NOT NULL,
    spent_usd REAL NOT NULL DEFAULT 0,
    reserved_usd REAL NOT NULL DEFAULT 0
);
-- The share a trial's running attempt reserved (NULL: none outstanding).
ALTER TABLE anvil_trials ADD COLUMN reserved_usd REAL;
