//! anvil-llm's integration tests, one binary: the recorded streams replayed (`fixtures`), the
//! providers over real HTTP (`http`), and the conformance scenarios in every wire format
//! (`conformance`). `flood.rs` is a binary of its own: it measures the whole process's peak
//! memory, which tests running beside it would inflate.

mod suite;
