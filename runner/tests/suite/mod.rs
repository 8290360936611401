mod auto;
mod budget;
mod cli;
mod otel;
mod queue;
mod sessions;
