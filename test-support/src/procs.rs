//! The live processes of this machine, read from `/proc`: what a test looks for when it
//! asserts that something still runs, or no longer does.

/// Every live process (zombies left out: they have ended) as its pid and its arguments.
pub fn live() -> Vec<(i32, Vec<String>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        // `pid (comm) S …`: the state follows the last `)`.
        let zombie = std::fs::read_to_string(entry.path().join("stat"))
            .map(|s| {
                s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(true);
        if zombie {
            continue;
        }
        let args = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        out.push((pid, args));
    }
    out
}

/// The pids of live processes one of whose arguments contains `needle`.
pub fn naming(needle: &str) -> Vec<i32> {
    live()
        .into_iter()
        .filter(|(_, args)| args.iter().any(|a| a.contains(needle)))
        .map(|(pid, _)| pid)
        .collect()
}

/// The pids of live processes that have every one of `parts` as an argument.
pub fn running(parts: &[&str]) -> Vec<i32> {
    live()
        .into_iter()
        .filter(|(_, args)| parts.iter().all(|p| args.iter().any(|a| a == p)))
        .map(|(pid, _)| pid)
        .collect()
}
