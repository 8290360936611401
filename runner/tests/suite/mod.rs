mod cli;
mod queue;
mod sessions;
