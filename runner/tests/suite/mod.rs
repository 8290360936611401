mod auto;
mod budget;
mod cli;
mod queue;
mod sessions;
