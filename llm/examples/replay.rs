//! Replays a recorded SSE response body through the adapter pipeline and prints the canonical
//! Completion as one JSON object.
//!
//! ```text
//! cargo run -p anvil-llm --example replay -- --protocol anthropic llm/tests/fixtures/anthropic/01-text.sse
//! ```
//!
//! Output: `{"message": …, "finish": …, "usage": …}` on success (exit 0), or
//! `{"error": {"kind": …, "message": …}}` when the stream reports or causes an error (exit 1).
//! Bad arguments print usage on stderr and exit 2.

use std::process::ExitCode;

use anvil_llm::Protocol;
use anvil_llm::replay::replay_body;

const USAGE: &str = "usage: replay --protocol <anthropic|openai-chat|openai-responses|gemini> FILE";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (protocol, file) = match args.as_slice() {
        [flag, protocol, file] if flag == "--protocol" => (protocol, file),
        [file, flag, protocol] if flag == "--protocol" => (protocol, file),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let Some(protocol) = Protocol::parse(protocol) else {
        eprintln!("unknown protocol '{protocol}'\n{USAGE}");
        return ExitCode::from(2);
    };
    let body = match std::fs::read(file) {
        Ok(body) => body,
        Err(e) => {
            eprintln!("could not read {file}: {e}");
            return ExitCode::from(2);
        }
    };
    match replay_body(protocol, &body) {
        Ok(completion) => {
            println!("{}", serde_json::json!(completion));
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!(
                "{}",
                serde_json::json!({"error": {"kind": e.kind(), "message": e.to_string()}})
            );
            ExitCode::from(1)
        }
    }
}
