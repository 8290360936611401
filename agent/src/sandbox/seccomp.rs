//! The seccomp filter for sandboxes without network. A network namespace alone still lets code
//! reach host daemons over filesystem Unix sockets (Postgres, Docker, the session bus — verified
//! on this machine), so the filter refuses, with EPERM:
//! - `socket` for any family but AF_UNIX (no IP, netlink, packet sockets);
//! - `socket(AF_UNIX, …)` of any type but `SOCK_STREAM` and `SOCK_SEQPACKET` (an allowlist
//!   over the whole type field): an unconnected datagram socket needs no `connect` to reach a host daemon —
//!   `sendto`/`sendmsg` name the address (`/dev/log`, `$NOTIFY_SOCKET`), and seccomp cannot
//!   look inside `sendmsg`'s message — and `SOCK_RAW`/`SOCK_SEQPACKET` lead to the same place,
//!   so no such socket is created at all;
//! - `connect`, `bind` and `listen` (no talking to a host daemon's socket, no servers);
//! - io_uring, which can issue those operations without the syscalls above;
//! - on x86_64, the same calls under their x32-ABI numbers (bit 30 set), for kernels that
//!   have x32.
//!
//! `socketpair` is allowed for stream and seqpacket pairs only (the same allowlist): a datagram pair can
//! `sendto` any path, a host daemon's included. Pipes and stream pairs between processes of the
//! command keep working.

use std::collections::BTreeMap;
use std::io::{Seek, Write};

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

fn arch() -> Result<TargetArch, String> {
    match std::env::consts::ARCH {
        "x86_64" => Ok(TargetArch::x86_64),
        "aarch64" => Ok(TargetArch::aarch64),
        "riscv64" => Ok(TargetArch::riscv64),
        other => Err(format!("no seccomp filter for the {other} architecture")),
    }
}

/// The compiled filter (see the module docs).
pub fn no_network_program() -> Result<BpfProgram, String> {
    let fail = |e: seccompiler::BackendError| format!("cannot build the seccomp filter: {e}");
    let not_unix = SeccompRule::new(vec![
        SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Ne,
            libc::AF_UNIX as u64,
        )
        .map_err(fail)?,
    ])
    .map_err(fail)?;
    // An allowlist over the whole type field: the kernel reads the type as `type & 0xf` (the
    // bits above carry SOCK_NONBLOCK / SOCK_CLOEXEC, anything else is EINVAL), so refusing
    // every one of the 16 values but SOCK_STREAM leaves nothing else through — including
    // SOCK_RAW, which the kernel quietly turns into a datagram socket for AF_UNIX.
    const SOCK_TYPE_MASK: u64 = 0xf;
    // Stream, and seqpacket: connection-oriented, so a socket of either reaches nothing without
    // `connect` (refused below), and Rust's std sends a spawned child's pidfd over a seqpacket
    // socketpair (cargo could not run rustc without it).
    const ALLOWED_TYPES: [u64; 2] = [libc::SOCK_STREAM as u64, libc::SOCK_SEQPACKET as u64];
    // One rule per refused type: the rule matches (and refuses) when `type & 0xf` is it.
    let refused_types = (0..=SOCK_TYPE_MASK)
        .filter(|kind| !ALLOWED_TYPES.contains(kind))
        .map(|kind| {
            let cond = SeccompCondition::new(
                1,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::MaskedEq(SOCK_TYPE_MASK),
                kind,
            )
            .map_err(fail)?;
            SeccompRule::new(vec![cond]).map_err(fail)
        })
        .collect::<Result<Vec<_>, String>>()?;
    let mut socket_rules = vec![not_unix];
    socket_rules.extend(refused_types.iter().cloned());
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    // socketpair by the same allowlist: an unconnected datagram pair can `sendto` any path,
    // a host daemon's socket included.
    let pair_rules = refused_types;
    rules.insert(libc::SYS_socket, socket_rules);
    rules.insert(libc::SYS_socketpair, pair_rules);
    for always in [
        libc::SYS_connect,
        libc::SYS_bind,
        libc::SYS_listen,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
    ] {
        rules.insert(always, Vec::new());
    }
    // x86_64 kernels built with the x32 ABI take the same calls with bit 30 set in the
    // number: each rule again under that number, so x32 code is held to the same filter.
    if std::env::consts::ARCH == "x86_64" {
        const X32: i64 = 0x4000_0000;
        let x32: Vec<(i64, Vec<SeccompRule>)> =
            rules.iter().map(|(nr, r)| (nr | X32, r.clone())).collect();
        rules.extend(x32);
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch()?,
    )
    .map_err(fail)?;
    BpfProgram::try_from(filter).map_err(fail)
}

/// The program as the bytes bubblewrap's `--seccomp FD` reads (struct sock_filter, native
/// endianness).
pub fn to_bytes(program: &BpfProgram) -> Vec<u8> {
    let mut out = Vec::with_capacity(program.len() * 8);
    for insn in program {
        out.extend_from_slice(&insn.code.to_ne_bytes());
        out.push(insn.jt);
        out.push(insn.jf);
        out.extend_from_slice(&insn.k.to_ne_bytes());
    }
    out
}

/// A file holding the filter, at offset 0, for bubblewrap's `--seccomp FD`. It stays
/// close-on-exec here: the process supervisor places it in bubblewrap alone
/// ([`ProcessSpec::pass_fd`](crate::process::ProcessSpec::pass_fd)).
pub fn filter_file() -> Result<std::fs::File, String> {
    // Compiled once per process.
    static BYTES: std::sync::OnceLock<Result<Vec<u8>, String>> = std::sync::OnceLock::new();
    let bytes = BYTES
        .get_or_init(|| no_network_program().map(|p| to_bytes(&p)))
        .clone()?;
    let io = |e: std::io::Error| format!("cannot write the seccomp filter: {e}");
    let mut file = tempfile::tempfile().map_err(io)?;
    file.write_all(&bytes).map_err(io)?;
    file.rewind().map_err(io)?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_compiles_to_whole_instructions() {
        let program = no_network_program().unwrap();
        assert!(program.len() > 8);
        assert_eq!(to_bytes(&program).len(), program.len() * 8);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x32_numbers_are_filtered_too() {
        let program = no_network_program().unwrap();
        for nr in [libc::SYS_socket, libc::SYS_connect, libc::SYS_socketpair] {
            let x32 = (nr | 0x4000_0000) as u32;
            assert!(
                program.iter().any(|insn| insn.k == x32),
                "no rule for the x32 number of syscall {nr}"
            );
        }
    }
}
