-- How often each worker beats and how many beats it may miss before it is presumed dead
-- (sqlite), so that `anvil-evals status` can tell a dead worker from a live one by the worker's
-- own settings. NULL for workers registered before: the defaults (5000 ms, 3).
ALTER TABLE anvil_workers ADD COLUMN heartbeat_ms INTEGER;
ALTER TABLE anvil_workers ADD COLUMN missed_heartbeats INTEGER;
