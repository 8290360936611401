//! `anvil`: see `anvil --help`.

use clap::Parser;
use clap::error::ErrorKind;

use anvil_runner::cli::Cli;
use anvil_runner::cli::args::{Command, McpCommand};
use anvil_runner::cli::{headless, mcp, repl, sessions};
use anvil_runner::exit;

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => exit::DONE,
                _ => exit::USAGE,
            };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    // `-C` to a directory that is not there is a bad argument, whatever the command.
    if let Err(e) = anvil_runner::cli::setup::check_cwd_arg(&cli) {
        std::process::exit(headless::fail_setup(
            cli.output_format,
            &e.to_string(),
            exit::USAGE,
        ));
    }
    let telemetry = anvil_runner::telemetry::init("anvil", None);
    let code = match (&cli.command, cli.print.clone()) {
        (Some(Command::Sessions { all }), _) => sessions::list(&cli, *all),
        (Some(Command::Replay { session, format }), _) => sessions::replay(&cli, session, *format),
        (Some(Command::Auto { command }), _) => anvil_runner::auto::cli::main(command),
        (Some(Command::Mcp { command }), _) => match anvil_runner::cli::setup::workspace(&cli) {
            Err(e) => {
                eprintln!("anvil: {e}");
                exit::CONFIG
            }
            Ok(cwd) => match command {
                McpCommand::List => mcp::list(&cwd),
                McpCommand::Call { server, tool, args } => mcp::call(&cwd, server, tool, args),
                McpCommand::Conformance { url } => mcp::conformance(url),
            },
        },
        (None, prompt) => run(cli, prompt),
    };
    drop(telemetry); // flushes the log and the exporter: exit runs no destructors
    std::process::exit(code);
}

fn run(cli: Cli, print: Option<String>) -> i32 {
    match print {
        Some(prompt) => match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt.block_on(headless::run(cli, prompt)),
            Err(e) => {
                eprintln!("anvil: cannot start the runtime: {e}");
                exit::FAILED
            }
        },
        None => repl::run(cli),
    }
}
