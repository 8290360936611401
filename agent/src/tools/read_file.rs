//! `read_file`: numbered lines of a text file.

use std::sync::Arc;

use anvil_llm::text::Limit;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::file_access::FileAccess;
use crate::tool::{Cancellation, Effects, ToolContext, ToolError, TypedTool};

const DEFAULT_LIMIT: usize = 2000;
const MAX_LINE_CHARS: usize = 2000;
const BINARY_SNIFF: usize = 8 * 1024;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// Path of the file, absolute or relative to the working directory.
    pub file_path: String,
    /// The first line to show, counting from 1. Default 1.
    #[serde(default)]
    pub offset: Option<usize>,
    /// How many lines to show. Default 2000.
    #[serde(default)]
    pub limit: Option<usize>,
}

pub struct ReadFile {
    access: Arc<FileAccess>,
}

impl ReadFile {
    pub fn new(access: Arc<FileAccess>) -> Self {
        Self { access }
    }
}

#[async_trait::async_trait]
impl TypedTool for ReadFile {
    type Args = ReadFileArgs;
    const NAME: &'static str = "read_file";
    const EFFECTS: Effects = Effects::READ_ONLY;
    const CANCELLATION: Cancellation = Cancellation::Immediate;

    fn description(&self) -> &str {
        "Read a text file, shown as numbered lines (`     N\\t<line>`). Use it before editing or \
         overwriting a file: edit_file and write_file refuse files you have not read, or that \
         changed since you read them. Prefer it over `cat`, `head` or `sed -n` in bash. For long \
         files read a range with offset and limit (default: the first 2000 lines); lines over \
         2000 characters are cut. Binary files and credential files (.env, private keys) are \
         refused. The line numbers are not part of the file: never include them in edit_file's \
         old_string."
    }

    fn permission_subject(&self, args: &serde_json::Value) -> Option<String> {
        args.get("file_path")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    }

    async fn run(&self, args: ReadFileArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let path = FileAccess::resolve(&ctx.cwd, &args.file_path);
        let canonical = self.access.check_read(&path)?;
        if canonical.is_dir() {
            return Err(ToolError::Failed(format!(
                "{} is a directory. Use glob to list files.",
                path.display()
            )));
        }
        let bytes = tokio::fs::read(&canonical)
            .await
            .map_err(|e| ToolError::Failed(format!("{}: {e}", path.display())))?;
        if bytes[..bytes.len().min(BINARY_SNIFF)].contains(&0) {
            return Err(ToolError::Failed(format!(
                "{} looks like a binary file (it has NUL bytes); read_file shows text only.",
                path.display()
            )));
        }
        self.access.record(&canonical, &bytes);
        let text = String::from_utf8_lossy(&bytes);
        let offset = args.offset.unwrap_or(1).max(1);
        let limit = args.limit.unwrap_or(DEFAULT_LIMIT).max(1);
        let total = text.lines().count();
        if total == 0 {
            return Ok(format!("({} is empty)", path.display()));
        }
        if offset > total {
            return Err(ToolError::Failed(format!(
                "offset {offset} is past the end: {} has {total} lines.",
                path.display()
            )));
        }
        let mut out = String::with_capacity(bytes.len().min(1 << 20) + 64);
        for (i, line) in text.lines().enumerate().skip(offset - 1).take(limit) {
            let line = line.strip_suffix('\r').unwrap_or(line);
            out.push_str(&format!("{:>6}\t", i + 1));
            out.push_str(
                &Limit::chars(MAX_LINE_CHARS)
                    .apply(line)
                    .with_marker(" [… line cut]"),
            );
            out.push('\n');
        }
        let last = (offset - 1 + limit).min(total);
        if last < total {
            out.push_str(&format!(
                "[showing lines {offset}-{last} of {total}; read more with offset={}]\n",
                last + 1
            ));
        }
        Ok(out)
    }
}
