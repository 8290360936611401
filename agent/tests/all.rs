//! anvil-agent's integration tests, one binary: the agent loop against a scripted provider,
//! the file and bash tools, permissions, and the sandbox against real processes and real
//! bubblewrap (escapes, privileged operations, resource limits).

mod suite;
