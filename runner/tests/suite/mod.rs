mod auto;
mod cli;
mod queue;
mod sessions;
