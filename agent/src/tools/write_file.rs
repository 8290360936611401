//! `write_file`: create or overwrite a file, atomically.

use std::path::Path;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::file_access::FileAccess;
use crate::tool::{Cancellation, Effects, ToolContext, ToolError, TypedTool};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileArgs {
    /// Path of the file, absolute or relative to the working directory.
    pub file_path: String,
    /// The complete new content of the file.
    pub content: String,
}

pub struct WriteFile {
    access: Arc<FileAccess>,
}

impl WriteFile {
    pub fn new(access: Arc<FileAccess>) -> Self {
        Self { access }
    }
}

/// Writes `content` to `target` via a temp file in the same directory and a rename, so a
/// reader never sees a half-written file. Keeps an existing file's permissions.
pub(crate) fn write_atomic(target: &Path, content: &[u8]) -> Result<(), ToolError> {
    let fail = |e: std::io::Error| ToolError::Failed(format!("{}: {e}", target.display()));
    let dir = target.parent().ok_or_else(|| {
        ToolError::Failed(format!("{} has no parent directory", target.display()))
    })?;
    std::fs::create_dir_all(dir).map_err(fail)?;
    let permissions = std::fs::metadata(target).ok().map(|m| m.permissions());
    let mut tmp = tempfile::Builder::new()
        .prefix(".anvil-write-")
        .tempfile_in(dir)
        .map_err(fail)?;
    std::io::Write::write_all(&mut tmp, content).map_err(fail)?;
    tmp.as_file().sync_all().map_err(fail)?;
    if let Some(p) = permissions {
        std::fs::set_permissions(tmp.path(), p).map_err(fail)?;
    }
    tmp.persist(target).map_err(|e| fail(e.error))?;
    Ok(())
}

#[async_trait::async_trait]
impl TypedTool for WriteFile {
    type Args = WriteFileArgs;
    const NAME: &'static str = "write_file";
    const EFFECTS: Effects = Effects::WRITES;
    const CANCELLATION: Cancellation = Cancellation::Atomic;

    fn description(&self) -> &str {
        "Create a file, or replace a whole file, with the given content; parent directories are \
         created. To change part of an existing file use edit_file instead: it is safer and \
         cheaper. Overwriting an existing file requires that you read_file it first and that it \
         did not change since. The write is atomic: the file is either fully replaced or left \
         as it was. Paths outside the workspace, .git/ and anvil's config are refused."
    }

    fn permission_subject(&self, args: &serde_json::Value) -> Option<String> {
        args.get("file_path")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    }

    async fn run(&self, args: WriteFileArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let path = FileAccess::resolve(&ctx.cwd, &args.file_path);
        let target = self.access.check_write(&path)?;
        let existed = target.exists();
        if existed {
            if target.is_dir() {
                return Err(ToolError::Failed(format!(
                    "{} is a directory",
                    path.display()
                )));
            }
            self.access.check_fresh(&target)?;
        }
        write_atomic(&target, args.content.as_bytes())?;
        self.access.record(&target, args.content.as_bytes());
        let lines = args.content.lines().count();
        Ok(format!(
            "{} {} ({lines} lines, {} bytes).",
            if existed { "Overwrote" } else { "Created" },
            path.display(),
            args.content.len()
        ))
    }
}
