//! Logs go to `<data dir>/anvil/logs/anvil.log`, and only when `ANVIL_LOG` is set (an EnvFilter
//! such as `debug` or `anvil_llm=trace`). They never reach stdout or stderr: in headless mode
//! those carry the requested output only.

use std::sync::Mutex;

pub fn init() {
    let Ok(filter) = std::env::var("ANVIL_LOG") else {
        return;
    };
    let Some(dir) = anvil_llm::config::data_dir().map(|d| d.join("logs")) else {
        return;
    };
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    let Ok(file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("anvil.log"))
    else {
        return;
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_ansi(false)
        .with_writer(Mutex::new(file))
        .try_init();
}
