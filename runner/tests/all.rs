//! anvil-runner's integration tests, one binary: the real `anvil` binary against a scripted
//! model server (`cli`), and the job queue with its workers on both databases (`queue`).

mod suite;
