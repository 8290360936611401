//! The exit codes of `anvil -p`, one per way a turn can end. Scripts branch on these; they are
//! documented in `--help` and the README, and must never change meaning.

use anvil_agent::TurnOutcome;

pub const DONE: i32 = 0;
/// The turn failed: the provider was unreachable after retries, a stream broke, or a tool
/// setup failed.
pub const FAILED: i32 = 1;
pub const MAX_STEPS: i32 = 2;
/// The model hit its output-token limit.
pub const MAX_TOKENS: i32 = 3;
pub const REFUSED: i32 = 4;
/// The provider stopped for a reason anvil does not model.
pub const PROTOCOL_STOPPED: i32 = 5;
/// Configuration: a missing API key, an unknown model, an invalid config file.
pub const CONFIG: i32 = 6;
/// The hard budget (`--max-cost-usd`) could not admit the next model request; nothing more was
/// spent. Also: a hard budget on a model without pricing.
pub const BUDGET_EXCEEDED: i32 = 7;
/// The command line was wrong.
pub const USAGE: i32 = 64;
/// Interrupted (Ctrl-C) or stdout closed.
pub const CANCELLED: i32 = 130;

pub fn code(outcome: &TurnOutcome) -> i32 {
    match outcome {
        TurnOutcome::Done => DONE,
        TurnOutcome::MaxSteps => MAX_STEPS,
        TurnOutcome::MaxTokens => MAX_TOKENS,
        TurnOutcome::Refused => REFUSED,
        TurnOutcome::Cancelled => CANCELLED,
        TurnOutcome::ProtocolStopped { .. } => PROTOCOL_STOPPED,
        TurnOutcome::Failed { .. } => FAILED,
        TurnOutcome::BudgetExceeded { .. } => BUDGET_EXCEEDED,
    }
}

/// The exit-code table for `--help`.
pub const TABLE: &str = "\
Exit codes (headless mode):
  0    done: the model finished its answer
  1    failed: provider unreachable after retries, broken stream, or a runtime error
  2    max steps: the step limit (--max-steps) was reached
  3    max tokens: the model hit its output limit
  4    refused: the model refused
  5    protocol stopped: the provider stopped for a reason anvil does not model
  6    configuration error: missing API key, unknown model, invalid config
  7    budget exceeded: the next request's reserved cost did not fit --max-cost-usd
       (nothing more was spent), or the model has no pricing for a hard budget
  64   usage error: bad command-line arguments (an empty prompt, a -C directory that is
       not there)
  130  cancelled: Ctrl-C, or stdout was closed";
