-- `anvil auto` (sqlite): runs, their session attempts and what the harness recorded about them.
-- Times are unix milliseconds; money is USD. See runner/src/auto/mod.rs.

-- One row per run: where it works, what it was asked, its limits, its pinned model, its state.
CREATE TABLE IF NOT EXISTS auto_runs (
    id TEXT PRIMARY KEY NOT NULL,
    created_at_ms INTEGER NOT NULL,
    -- The checkout's top level and the spec file (absolute).
    repository TEXT NOT NULL,
    spec_path TEXT NOT NULL,
    spec_digest TEXT NOT NULL,
    -- Set when the initializer's contract is accepted.
    contract_digest TEXT,
    accepted_commit TEXT,
    -- The commit the run branch started from.
    start_commit TEXT NOT NULL,
    max_sessions INTEGER,
    max_cost_usd REAL,
    allow_regressions INTEGER NOT NULL DEFAULT 0,
    max_steps INTEGER NOT NULL,
    session_timeout_s INTEGER NOT NULL,
    -- The pinned model (JSON), as every session of the run runs it.
    model TEXT NOT NULL,
    -- Where the run's attempts, transcripts and leftovers live on the machines that run it.
    data_dir TEXT NOT NULL,
    -- running | complete | session_limited | budget_limited | stalled | cancelled |
    -- invalid_contract | infra_failed
    state TEXT NOT NULL,
    terminal_reason TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0
);

CREATE INDEX IF NOT EXISTS auto_runs_repository ON auto_runs (repository, spec_digest, state);

-- One row per session attempt. Writes are fenced: only the newest attempt of a session writes.
CREATE TABLE IF NOT EXISTS auto_sessions (
    run TEXT NOT NULL,
    session INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    -- initializer | worker
    kind TEXT NOT NULL,
    -- running | validating | validated | merged | not_merged | unchanged | rejected |
    -- infra_failed | dead | cancelled
    state TEXT NOT NULL,
    -- Comma-separated: rejected_edit, protected_edit, max_steps, session_timed_out.
    flags TEXT NOT NULL DEFAULT '',
    base TEXT,
    candidate TEXT,
    merged TEXT,
    -- The session's verdict (JSON), recorded before any merge.
    verdict TEXT,
    -- Features newly verified (JSON array).
    verified_delta TEXT,
    outcome TEXT,
    cost_usd REAL,
    accounting TEXT,
    transcript TEXT,
    worker TEXT,
    error TEXT,
    started_at_ms INTEGER NOT NULL,
    ended_at_ms INTEGER,
    PRIMARY KEY (run, session, attempt)
);

-- What the harness recorded: validator findings, claims, checks, and the run's ledger events
-- (kind 'ledger', payload a run_state::Event), in order.
CREATE TABLE IF NOT EXISTS auto_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run TEXT NOT NULL,
    session INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    at_ms INTEGER NOT NULL
);

CREATE INDEX IF NOT EXISTS auto_events_run ON auto_events (run, kind);
