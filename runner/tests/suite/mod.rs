mod auto;
mod budget;
mod cli;
mod mcp;
mod otel;
mod queue;
mod sessions;
