//! A run's state (sans-IO): the ledger folded from what happened to its sessions, the
//! decision "after this session, what next", and the terminal states with their exit codes.
//!
//! The orchestrator asks [`Ledger::next`] before every session and feeds the session's end
//! back with [`Ledger::apply`]; the ledger can be rebuilt from the recorded events
//! ([`Ledger::replay`]), so a restarted worker decides exactly as the dead one would have.
//!
//! The rules, in the order [`Ledger::next`] applies them:
//! 1. **Complete** when the contract was accepted and the harness has verified every one of
//!    its features. The harness's count is the only input: a model saying "all done" changes
//!    nothing, and a run that verified nothing can never be complete (a contract has at least
//!    one feature, and every check fails at the init commit).
//! 2. **Cancelled** once a cancel was recorded.
//! 3. **InfraFailed** on a persistent infrastructure failure (an auth error), or after more
//!    than [`Limits::infra_retries`] infrastructure failures of one session in a row.
//!    Infrastructure failures re-run the same session as its next attempt; they never count
//!    towards `--max-sessions` or the stall breaker.
//! 4. **InvalidContract** when the initializer's contract was refused twice (it is re-run
//!    once with the reason).
//! 5. **Stalled** after [`Limits::stall_after`] (default 3) worker sessions in a row with no
//!    newly verified feature and no diff outside the progress notes, or with the same
//!    failing output ([`crate::auto::verdict::SessionVerdict::failure_fingerprint`]).
//! 6. **SessionLimited** when `--max-sessions` worker sessions have finished (the initializer
//!    and retried attempts do not count).
//! 7. **BudgetLimited** by admission: the next session starts only if what was spent plus
//!    its reserved estimate stays within `--max-cost-usd`; with a budget, unknown pricing (or
//!    a session whose cost is unknown) admits nothing.
//!
//! Otherwise the next session starts: the initializer while no contract is accepted, else a
//! worker. Session numbers are never reused (the initializer is session 0; a re-run
//! initializer takes the next number); a retry is the same session's next attempt.

use serde::{Deserialize, Serialize};

use crate::auto::ids::AttemptId;

/// How a run ended. Each has its own exit code ([`Terminal::exit_code`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Terminal {
    /// The harness verified every feature.
    Complete,
    /// `--max-sessions` worker sessions ran.
    SessionLimited,
    /// The next session's reserved cost does not fit the budget (or cannot be known).
    BudgetLimited,
    /// Sessions in a row made no progress, or failed the same way.
    Stalled,
    /// `anvil auto cancel`.
    Cancelled,
    /// The initializer's contract was refused (twice).
    InvalidContract,
    /// The infrastructure failed persistently (auth) or past its retries.
    InfraFailed,
}

/// `anvil auto`'s exit codes, one per terminal state. 0 only for [`Terminal::Complete`]; the
/// others are apart from every code `anvil -p` uses ([`crate::exit`]), which keep their
/// meaning for `anvil auto` too: 6 a configuration error before any run starts, 64 a usage
/// error, 130 this process was interrupted (Ctrl-C) — the run is not over and resumes.
pub mod codes {
    pub const COMPLETE: i32 = 0;
    pub const SESSION_LIMITED: i32 = 10;
    pub const BUDGET_LIMITED: i32 = 11;
    pub const STALLED: i32 = 12;
    pub const CANCELLED: i32 = 13;
    pub const INVALID_CONTRACT: i32 = 14;
    pub const INFRA_FAILED: i32 = 15;
}

/// The exit-code table for `anvil auto --help` and the README.
pub const EXIT_TABLE: &str = "\
Exit codes (anvil auto):
  0    complete: the harness verified every feature
  10   session limited: --max-sessions worker sessions ran
  11   budget limited: the next session does not fit --max-cost-usd (or its cost is unknown)
  12   stalled: sessions in a row made no progress, or failed the same way
  13   cancelled: anvil auto cancel
  14   invalid contract: the initializer's features.json was refused
  15   infra failed: a persistent infrastructure failure, or one past its retries
  6    configuration error (no run started)
  64   usage error
  130  interrupted: this process stopped; the run resumes";

impl Terminal {
    pub const ALL: [Terminal; 7] = [
        Terminal::Complete,
        Terminal::SessionLimited,
        Terminal::BudgetLimited,
        Terminal::Stalled,
        Terminal::Cancelled,
        Terminal::InvalidContract,
        Terminal::InfraFailed,
    ];

    pub fn exit_code(self) -> i32 {
        match self {
            Terminal::Complete => codes::COMPLETE,
            Terminal::SessionLimited => codes::SESSION_LIMITED,
            Terminal::BudgetLimited => codes::BUDGET_LIMITED,
            Terminal::Stalled => codes::STALLED,
            Terminal::Cancelled => codes::CANCELLED,
            Terminal::InvalidContract => codes::INVALID_CONTRACT,
            Terminal::InfraFailed => codes::INFRA_FAILED,
        }
    }

    /// The state's name in reports (`anvil auto report --json`'s `state`).
    pub fn name(self) -> &'static str {
        match self {
            Terminal::Complete => "complete",
            Terminal::SessionLimited => "session_limited",
            Terminal::BudgetLimited => "budget_limited",
            Terminal::Stalled => "stalled",
            Terminal::Cancelled => "cancelled",
            Terminal::InvalidContract => "invalid_contract",
            Terminal::InfraFailed => "infra_failed",
        }
    }
}

/// The run's limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Worker sessions at most (`--max-sessions`).
    pub max_sessions: Option<u32>,
    /// A hard budget (`--max-cost-usd`).
    pub max_cost_usd: Option<f64>,
    /// Sessions in a row without progress (or with the same failure) that stall the run.
    pub stall_after: u32,
    /// Infrastructure failures of one session in a row that are retried.
    pub infra_retries: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_sessions: None,
            max_cost_usd: None,
            stall_after: 3,
            infra_retries: 3,
        }
    }
}

/// What the next session is expected to cost, reserved before it starts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Estimate {
    Usd(f64),
    /// The model has no pricing.
    UnknownPricing,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionKind {
    Initializer,
    Worker,
}

/// How a worker session ended, as far as the run's decisions go. Counts are of what landed
/// on the run branch (a session that was not merged verified nothing and changed nothing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerSession {
    /// Features newly verified by this session.
    pub newly_verified: usize,
    /// Features verified after it (by the harness).
    pub verified: usize,
    /// Whether it changed anything but the progress notes.
    pub changed_outside_notes: bool,
    pub failure_fingerprint: Option<String>,
    /// `None`: unknown.
    pub cost_usd: Option<f64>,
}

/// What happened to the run: one event per ended session attempt, or a cancel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "event")]
pub enum Event {
    /// The initializer's contract passed every check.
    ContractAccepted {
        features: usize,
        cost_usd: Option<f64>,
    },
    /// The initializer's contract was refused.
    ContractRejected {
        reason: String,
        cost_usd: Option<f64>,
    },
    WorkerFinished(WorkerSession),
    /// The attempt failed for infrastructure (an outage, a lost worker, a broken sandbox).
    InfraFailed {
        reason: String,
        /// Retrying cannot help (an auth error).
        persistent: bool,
        cost_usd: Option<f64>,
    },
    Cancelled,
}

/// An event that cannot happen where it was recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("event {event} cannot follow {after}")]
pub struct OutOfOrder {
    pub event: &'static str,
    pub after: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "contract")]
pub enum ContractState {
    #[default]
    Pending,
    Accepted {
        features: usize,
    },
    Invalid {
        reason: String,
    },
}

/// The run so far (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    pub contract: ContractState,
    /// Verified by the harness.
    pub verified: usize,
    /// The session the next attempt belongs to, and that attempt.
    pub next: AttemptId,
    /// Finished worker sessions.
    pub worker_sessions: u32,
    pub initializer_rejections: u32,
    pub last_rejection: Option<String>,
    pub spent_usd: f64,
    /// Some session's cost is unknown.
    pub cost_unknown: bool,
    /// Worker sessions in a row with no newly verified feature and no diff outside notes.
    pub no_progress: u32,
    /// The last failure fingerprint and how many worker sessions in a row ended with it.
    pub same_failure: Option<(String, u32)>,
    /// Infrastructure failures of the current session in a row.
    pub infra_in_a_row: u32,
    pub infra_persistent: Option<String>,
    pub cancelled: bool,
}

impl Default for Ledger {
    fn default() -> Self {
        Self {
            contract: ContractState::Pending,
            verified: 0,
            next: AttemptId::new(0, 1),
            worker_sessions: 0,
            initializer_rejections: 0,
            last_rejection: None,
            spent_usd: 0.0,
            cost_unknown: false,
            no_progress: 0,
            same_failure: None,
            infra_in_a_row: 0,
            infra_persistent: None,
            cancelled: false,
        }
    }
}

/// What to do next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "next")]
pub enum Next {
    Start {
        kind: SessionKind,
        attempt: AttemptId,
        /// For a re-run initializer: why its last contract was refused.
        note: Option<String>,
    },
    Stop {
        terminal: Terminal,
        reason: String,
    },
}

/// `usd` in whole billionths of a dollar, for comparing amounts of money: sums of `f64`
/// costs are off by an ulp (three sessions of $0.00051 make $0.0015300000000000001), which
/// must not refuse a session that fits a budget exactly. A billionth is far below any
/// price a provider charges for a token.
fn nano_usd(usd: f64) -> i128 {
    (usd * 1e9).round() as i128
}

/// How many times a refused contract's initializer is re-run.
const INITIALIZER_RERUNS: u32 = 1;

impl Ledger {
    /// The ledger after `events`, in order.
    pub fn replay<'a>(events: impl IntoIterator<Item = &'a Event>) -> Result<Self, OutOfOrder> {
        let mut ledger = Ledger::default();
        for e in events {
            ledger.apply(e)?;
        }
        Ok(ledger)
    }

    fn spend(&mut self, cost: Option<f64>) {
        match cost {
            Some(usd) if usd.is_finite() && usd >= 0.0 => self.spent_usd += usd,
            Some(_) | None => self.cost_unknown = true,
        }
    }

    fn next_session(&mut self) {
        self.next = AttemptId::new(self.next.session + 1, 1);
        self.infra_in_a_row = 0;
    }

    fn describe(&self) -> String {
        match &self.contract {
            ContractState::Pending => "a pending contract".into(),
            ContractState::Accepted { .. } => "an accepted contract".into(),
            ContractState::Invalid { .. } => "an invalid contract".into(),
        }
    }

    /// Folds one event in.
    pub fn apply(&mut self, event: &Event) -> Result<(), OutOfOrder> {
        let out_of_order = |event, ledger: &Ledger| OutOfOrder {
            event,
            after: ledger.describe(),
        };
        match event {
            Event::ContractAccepted { features, cost_usd } => {
                if self.contract != ContractState::Pending || *features == 0 {
                    return Err(out_of_order("contract_accepted", self));
                }
                self.spend(*cost_usd);
                self.contract = ContractState::Accepted {
                    features: *features,
                };
                self.next_session();
            }
            Event::ContractRejected { reason, cost_usd } => {
                if self.contract != ContractState::Pending {
                    return Err(out_of_order("contract_rejected", self));
                }
                self.spend(*cost_usd);
                self.initializer_rejections += 1;
                self.last_rejection = Some(reason.clone());
                if self.initializer_rejections > INITIALIZER_RERUNS {
                    self.contract = ContractState::Invalid {
                        reason: reason.clone(),
                    };
                }
                self.next_session();
            }
            Event::WorkerFinished(session) => {
                let ContractState::Accepted { features } = self.contract else {
                    return Err(out_of_order("worker_finished", self));
                };
                if session.verified > features {
                    return Err(out_of_order("worker_finished", self));
                }
                self.spend(session.cost_usd);
                self.worker_sessions += 1;
                self.verified = session.verified;
                let progressed = session.newly_verified > 0 || session.changed_outside_notes;
                self.no_progress = if progressed { 0 } else { self.no_progress + 1 };
                self.same_failure = match (&self.same_failure, &session.failure_fingerprint) {
                    (_, None) => None,
                    (_, Some(_)) if session.newly_verified > 0 => None,
                    (Some((last, n)), Some(now)) if last == now => Some((last.clone(), n + 1)),
                    (_, Some(now)) => Some((now.clone(), 1)),
                };
                self.next_session();
            }
            Event::InfraFailed {
                reason,
                persistent,
                cost_usd,
            } => {
                self.spend(*cost_usd);
                if *persistent {
                    self.infra_persistent = Some(reason.clone());
                }
                self.infra_in_a_row += 1;
                self.next.attempt += 1;
            }
            Event::Cancelled => self.cancelled = true,
        }
        Ok(())
    }

    /// What to do next under `limits`, with `estimate` reserved for the next session.
    pub fn next(&self, limits: &Limits, estimate: Estimate) -> Next {
        let stop = |terminal, reason: String| Next::Stop { terminal, reason };
        if let ContractState::Accepted { features } = self.contract
            && features > 0
            && self.verified == features
        {
            return stop(
                Terminal::Complete,
                format!("the harness verified all {features} features"),
            );
        }
        if self.cancelled {
            return stop(Terminal::Cancelled, "the run was cancelled".into());
        }
        if let Some(reason) = &self.infra_persistent {
            return stop(
                Terminal::InfraFailed,
                format!("a persistent infrastructure failure: {reason}"),
            );
        }
        if self.infra_in_a_row > limits.infra_retries {
            return stop(
                Terminal::InfraFailed,
                format!(
                    "session {} failed for infrastructure {} times in a row",
                    self.next.session, self.infra_in_a_row
                ),
            );
        }
        if let ContractState::Invalid { reason } = &self.contract {
            return stop(
                Terminal::InvalidContract,
                format!("the initializer's contract was refused again: {reason}"),
            );
        }
        if limits.stall_after > 0 {
            if self.no_progress >= limits.stall_after {
                return stop(
                    Terminal::Stalled,
                    format!(
                        "{} sessions in a row verified nothing new and changed nothing but the progress notes",
                        self.no_progress
                    ),
                );
            }
            if let Some((_, n)) = &self.same_failure
                && *n >= limits.stall_after
            {
                return stop(
                    Terminal::Stalled,
                    format!("{n} sessions in a row ended with the same failing output"),
                );
            }
        }
        let accepted = matches!(self.contract, ContractState::Accepted { .. });
        if let Some(max) = limits.max_sessions
            && accepted
            && self.worker_sessions >= max
        {
            return stop(
                Terminal::SessionLimited,
                format!("{max} worker sessions ran (--max-sessions)"),
            );
        }
        if let Some(max) = limits.max_cost_usd {
            let refuse = |why: String| stop(Terminal::BudgetLimited, why);
            if self.cost_unknown {
                return refuse(format!(
                    "a session's cost is unknown, so no session fits the ${max} budget for sure"
                ));
            }
            match estimate {
                Estimate::UnknownPricing => {
                    return refuse(format!(
                        "the model has no pricing, so no session fits the ${max} budget for sure"
                    ));
                }
                Estimate::Usd(usd) if !(usd.is_finite() && usd >= 0.0) => {
                    return refuse(format!("the session's estimate ({usd}) is not a cost"));
                }
                Estimate::Usd(usd) if nano_usd(self.spent_usd + usd) > nano_usd(max) => {
                    return refuse(format!(
                        "${:.6} spent and the next session reserves ${usd:.6}: over the ${max} budget",
                        self.spent_usd
                    ));
                }
                Estimate::Usd(_) => {}
            }
        }
        let kind = if accepted {
            SessionKind::Worker
        } else {
            SessionKind::Initializer
        };
        let note = match kind {
            SessionKind::Initializer => self.last_rejection.clone(),
            SessionKind::Worker => None,
        };
        Next::Start {
            kind,
            attempt: self.next,
            note,
        }
    }
}

#[cfg(test)]
mod tests;
