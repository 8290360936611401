//! `edit_file`: replace an exact string in a file the agent has read.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::file_access::FileAccess;
use crate::tool::{Cancellation, Effects, ToolContext, ToolError, TypedTool};
use crate::tools::write_file::write_atomic;

/// Lines of context shown before and after the edited region.
const CONTEXT_LINES: usize = 4;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditFileArgs {
    /// Path of the file, absolute or relative to the working directory.
    pub file_path: String,
    /// The exact text to replace, including whitespace and indentation. Must occur exactly once
    /// unless replace_all is true.
    pub old_string: String,
    /// The text to put in its place.
    pub new_string: String,
    /// Replace every occurrence instead of requiring exactly one. Default false.
    #[serde(default)]
    pub replace_all: Option<bool>,
}

pub struct EditFile {
    access: Arc<FileAccess>,
}

impl EditFile {
    pub fn new(access: Arc<FileAccess>) -> Self {
        Self { access }
    }
}

#[async_trait::async_trait]
impl TypedTool for EditFile {
    type Args = EditFileArgs;
    const NAME: &'static str = "edit_file";
    const EFFECTS: Effects = Effects::WRITES;
    const CANCELLATION: Cancellation = Cancellation::Atomic;

    fn description(&self) -> &str {
        "Replace exact text in a file: old_string must appear in the file exactly once (copy it \
         from read_file output without the line-number prefix, whitespace and indentation \
         included), and is replaced by new_string. If old_string occurs more than once, include \
         enough surrounding lines to make it unique, or set replace_all to change every \
         occurrence (for renames). You must read_file the file first, and re-read it if it \
         changed. Prefer this over write_file for changes to existing files, and over sed in \
         bash. Line endings (LF or CRLF) are kept as the file has them. Returns the edited \
         region with line numbers so you can check the result."
    }

    fn permission_subject(&self, args: &serde_json::Value) -> Option<String> {
        args.get("file_path")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    }

    async fn run(&self, args: EditFileArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let path = FileAccess::resolve(&ctx.cwd, &args.file_path);
        let target = self.access.check_write(&path)?;
        if !target.is_file() {
            return Err(ToolError::Failed(format!(
                "{} does not exist. Use write_file to create a new file.",
                path.display()
            )));
        }
        if args.old_string.is_empty() {
            return Err(ToolError::Failed(
                "old_string is empty. To insert text, put a nearby existing line in old_string and repeat it in new_string together with the addition.".into(),
            ));
        }
        if args.old_string == args.new_string {
            return Err(ToolError::Failed(
                "old_string and new_string are identical; there is nothing to change.".into(),
            ));
        }
        let bytes = self.access.check_fresh(&target)?;
        let content = String::from_utf8(bytes).map_err(|_| {
            ToolError::Failed(format!(
                "{} is not valid UTF-8; edit_file only edits text files.",
                path.display()
            ))
        })?;
        // A CRLF file keeps CRLF: the model writes LF.
        let crlf = content.contains("\r\n");
        let (old, new) = if crlf && !args.old_string.contains('\r') {
            (
                args.old_string.replace('\n', "\r\n"),
                args.new_string.replace('\n', "\r\n"),
            )
        } else {
            (args.old_string.clone(), args.new_string.clone())
        };
        let matches = content.matches(old.as_str()).count();
        let replace_all = args.replace_all.unwrap_or(false);
        if matches == 0 {
            return Err(ToolError::Failed(format!(
                "old_string was not found in {}. Check whitespace and indentation (tabs versus spaces), leave out the line-number prefixes of read_file, and re-read the file to copy the exact text.",
                path.display()
            )));
        }
        if matches > 1 && !replace_all {
            return Err(ToolError::Failed(format!(
                "Found {matches} matches of old_string in {}. Add more surrounding lines to old_string so it matches exactly once, or set replace_all to true to change all {matches}.",
                path.display()
            )));
        }
        let first = content.find(old.as_str()).unwrap_or(0);
        let updated = if replace_all {
            content.replace(old.as_str(), &new)
        } else {
            content.replacen(old.as_str(), &new, 1)
        };
        write_atomic(&target, updated.as_bytes())?;
        self.access.record(&target, updated.as_bytes());

        let first_line = content[..first].matches('\n').count();
        let new_lines = new.matches('\n').count() + 1;
        let from = first_line.saturating_sub(CONTEXT_LINES);
        let to = first_line + new_lines + CONTEXT_LINES;
        let mut out = format!(
            "Edited {}: {} replacement{}.\n",
            path.display(),
            if replace_all { matches } else { 1 },
            if replace_all && matches != 1 { "s" } else { "" }
        );
        for (i, line) in updated.lines().enumerate().skip(from).take(to - from) {
            out.push_str(&format!(
                "{:>6}\t{}\n",
                i + 1,
                line.strip_suffix('\r').unwrap_or(line)
            ));
        }
        Ok(out)
    }
}
