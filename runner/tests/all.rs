//! anvil-runner's integration tests, one binary: the real `anvil` binary against a scripted
//! model server (`cli`), the job queue with its workers on both databases (`queue`), and
//! `anvil auto`'s git plumbing and verify step against real git and bubblewrap (`auto`).

mod suite;
