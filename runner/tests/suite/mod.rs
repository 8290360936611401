mod cli;
mod queue;
