//! Sessions: every conversation kept as an append-only JSONL file, so it survives the process
//! (`anvil --continue`, `anvil --resume ID`) and can be read afterwards (`anvil replay`, a
//! trial's transcript).
//!
//! - [`record`]: the file format — versioned [`Entry`] lines with monotonic sequence numbers,
//!   one [`Record`] each.
//! - [`state`]: the one reducer. The live agent applies every record it writes through
//!   [`SessionState::apply`], and loading applies every record read through it, so replaying a
//!   file gives exactly the live session.
//! - [`store`]: where files live, the writer, the loader, the lock, and [`repair`] of calls a
//!   crash left without a result.
//!
//! # Durability policy
//!
//! - Every record is one `write` of one whole line to a file opened for appending; nothing is
//!   buffered in the process, so `kill -9` loses no record that was written.
//! - `tool_started` and `tool_finished` are synced (`fdatasync`) before the writer returns: a
//!   tool call is on disk *before* it has any effect, and its finish right after its result.
//!   Every other record (and a new file's name) reaches the disk with the page cache: a power
//!   loss may lose the last of them, a process crash loses none.
//! - A crash mid-write leaves at most a torn final line (no newline): loading leaves it out,
//!   and resuming cuts it off. Any other line that does not read — malformed, out of sequence,
//!   from a newer format — refuses the whole file with its line number; nothing is half-read
//!   and nothing is rewritten.
//! - A call with `tool_started` and no `tool_finished` has an unknown outcome: resuming
//!   answers it as such and never runs it again by itself ([`repair`]). A call with its
//!   `tool_finished` and no result in the context ran, and its result was lost: resuming says
//!   so, never that it did not run.
//! - A failed append (a full disk) is undone and returned, and the writer appends nothing
//!   after it — a later, smaller record must not land after a missing one — so the file stays
//!   a whole prefix of the session; the agent ends the turn as failed.
//! - Known secret values are redacted from every string of a record before it is written. A
//!   record is encoded the same way whether or not secrets are known (same fields, same
//!   order), so every line re-encodes to its own bytes — opaque reasoning state included.
//! - One process appends to a file at a time: an advisory lock (`flock`) on the file itself,
//!   released when the process exits however it exits.

/// The file format.
pub mod record;
/// The reducer.
pub mod state;
/// Files: paths, writer, loader, lock, repair.
pub mod store;

pub use record::{Entry, FORMAT_VERSION, Record, ReplaceReason, Todo, TodoStatus};
pub use state::{Cost, FinishedCall, ModelSpend, OpenCall, ReduceError, SessionState};
pub use store::{
    Listing, LoadedSession, SessionError, SessionStore, SessionSummary, SessionWriter, load, repair,
};

#[cfg(test)]
mod tests;
