//! Exposed names: how a server's tool is named to the model and to permission rules.
//!
//! `mcp__<server>__<tool>`, as Claude Code names them, when that is a valid tool name
//! (`^[a-zA-Z0-9_-]{1,64}$`) that decodes to one (server, tool) pair: the tool name has only
//! allowed characters, no `__`, does not start or end with `_`, and the whole fits in 64. Every
//! other tool gets a sanitized, shortened name with a hash suffix of its (server, original
//! name) and a final `_` — stable across starts, independent of the order servers connect in,
//! and distinct for two names that share their first 64 characters.
//!
//! No server can take another's name:
//! - plain names are injective: a plain tool part contains no `__` and does not start with
//!   `_`, so the last `__` of a plain name is its separator;
//! - a hashed name ends with `_`, which no plain name does (a plain tool part does not end
//!   with `_`);
//! - two hashed names are equal only if 64 bits of SHA-256 over (server, tool) are: not
//!   something a server can arrange by choosing its tool names.

use sha2::{Digest, Sha256};

/// Longest tool name providers accept.
pub const MAX_NAME: usize = 64;

/// Hex digits of the hash suffix (64 bits: no collision by search).
const HASH_DIGITS: usize = 16;

/// The name tool `tool` of server `server` is exposed as.
pub fn exposed_name(server: &str, tool: &str) -> String {
    let plain = format!("mcp__{server}__{tool}");
    if plain.len() <= MAX_NAME && plain_tool_part(tool) {
        return plain;
    }
    let hash = {
        let mut h = Sha256::new();
        h.update(server.as_bytes());
        h.update([0]);
        h.update(tool.as_bytes());
        hex::encode(h.finalize())
    };
    let suffix = &hash[..HASH_DIGITS];
    let sanitized = format!("mcp__{server}__{}", sanitize(tool));
    let room = MAX_NAME - HASH_DIGITS - 2;
    // ASCII only after sanitizing, so any byte index is a char boundary.
    let head = &sanitized[..sanitized.len().min(room)];
    format!("{head}_{suffix}_")
}

/// Whether `tool` can stand in a plain exposed name.
fn plain_tool_part(tool: &str) -> bool {
    !tool.is_empty()
        && tool
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && !tool.contains("__")
        && !tool.starts_with('_')
        && !tool.ends_with('_')
}

/// Characters outside `[a-zA-Z0-9_-]` become `_`.
fn sanitize(tool: &str) -> String {
    tool.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Whether `name` is valid for a provider.
pub fn valid(name: &str) -> bool {
    (1..=MAX_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_as_claude_code_names_them() {
        assert_eq!(exposed_name("fs", "read_file"), "mcp__fs__read_file");
        assert_eq!(
            exposed_name("git-hub", "list-issues"),
            "mcp__git-hub__list-issues"
        );
    }

    #[test]
    fn two_long_names_with_the_same_first_64_characters_remain_distinct() {
        let long = "x".repeat(80);
        let a = exposed_name("srv", &format!("{long}_a"));
        let b = exposed_name("srv", &format!("{long}_b"));
        assert_ne!(a, b);
        assert!(valid(&a) && valid(&b), "{a} {b}");
        assert!(a.starts_with("mcp__srv__xxx"), "{a}");
    }

    #[test]
    fn sanitizing_collisions_are_distinct_and_deterministic() {
        let dotted = exposed_name("s", "a.b");
        let spaced = exposed_name("s", "a b");
        let plain = exposed_name("s", "a_b");
        assert_eq!(plain, "mcp__s__a_b");
        assert_ne!(dotted, spaced);
        assert_ne!(dotted, plain);
        assert_eq!(
            dotted,
            exposed_name("s", "a.b"),
            "stable across calls (and starts)"
        );
        assert!(
            valid(&dotted) && dotted.starts_with("mcp__s__a_b_"),
            "{dotted}"
        );
    }

    #[test]
    fn a_plain_name_never_equals_a_hashed_one() {
        // A reviewer's attack: server `x` tool `.r` was hashed to `mcp__x___r_5178e157`,
        // which server `x_` could claim with a tool named `r_5178e157`.
        let hashed = exposed_name("x", ".r");
        assert!(hashed.ends_with('_'), "{hashed}");
        let rest = hashed.strip_prefix("mcp__x___").unwrap();
        assert_ne!(exposed_name("x_", rest), hashed);
        assert_ne!(exposed_name("x_", rest.trim_end_matches('_')), hashed);
        // Plain names never end with `_`.
        for (server, tool) in [("a", "b"), ("a_", "b"), ("a-", "b-"), ("x", "r_5178e157")] {
            assert!(!exposed_name(server, tool).ends_with('_'));
        }
    }

    #[test]
    fn names_that_could_decode_two_ways_are_hashed() {
        // server "a" tool "b__c" against server "a__b" tool "c"
        assert_eq!(exposed_name("a__b", "c"), "mcp__a__b__c");
        assert_ne!(exposed_name("a", "b__c"), "mcp__a__b__c");
        // server "a_" tool "_b" against server "a__" tool "b"
        assert_ne!(exposed_name("a_", "_b"), exposed_name("a__", "b"));
        assert_ne!(exposed_name("a", "b_"), "mcp__a__b_");
    }

    #[test]
    fn unicode_and_empty_tool_names_become_valid_names() {
        for tool in ["", "résumé", "日本語", "a/b/c", &"é".repeat(100)] {
            let name = exposed_name("srv", tool);
            assert!(valid(&name), "{tool:?} -> {name}");
        }
    }

    #[test]
    fn a_long_server_name_still_gives_a_valid_name() {
        let server = "s".repeat(64);
        let name = exposed_name(&server, "echo");
        assert!(valid(&name), "{name}");
    }
}
