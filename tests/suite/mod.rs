mod auto;
mod hidden_answer;
mod lost_queue;
mod pinned_config;
mod sweep;
mod traces;
mod transcripts;
mod variants;
