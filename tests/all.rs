//! anvil's end-to-end tests: the ones that cross crates and processes. `anvil-evals` enqueues a
//! sweep and runs workers, each trial runs the real `anvil -p` against a scripted model server,
//! and the real grader checks the result. A test that drives one crate's own binary stays in
//! that crate (cargo builds it for them: `CARGO_BIN_EXE_*`); these need binaries of two
//! crates, found by `anvil_test_support::bins`.

mod suite;
