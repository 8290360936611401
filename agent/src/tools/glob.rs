//! `glob`: find files by name pattern.

use std::sync::Arc;
use std::time::SystemTime;

use globset::GlobBuilder;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::file_access::FileAccess;
use crate::tool::{Cancellation, Effects, ToolContext, ToolError, TypedTool};
use crate::tools::walk;

const MAX_RESULTS: usize = 200;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GlobArgs {
    /// A glob such as `**/*.rs` or `src/**/test_*.py`, matched against paths relative to
    /// `path`.
    pub pattern: String,
    /// The directory to search. Default: the working directory.
    #[serde(default)]
    pub path: Option<String>,
}

pub struct GlobTool {
    access: Arc<FileAccess>,
}

impl GlobTool {
    pub fn new(access: Arc<FileAccess>) -> Self {
        Self { access }
    }
}

#[async_trait::async_trait]
impl TypedTool for GlobTool {
    type Args = GlobArgs;
    const NAME: &'static str = "glob";
    const EFFECTS: Effects = Effects::READ_ONLY;
    const CANCELLATION: Cancellation = Cancellation::Immediate;

    fn description(&self) -> &str {
        "Find files whose path matches a glob pattern (`**/*.rs`, `src/**/mod.rs`, \
         `tests/test_*.py`), newest first. Use it to locate files by name; use grep to find \
         files by content. Prefer it over `find` or `ls -R` in bash. Files ignored by \
         .gitignore, .git/ and target/ are skipped; at most 200 paths are listed."
    }

    fn permission_subject(&self, args: &serde_json::Value) -> Option<String> {
        args.get("path")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    }

    async fn run(&self, args: GlobArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let root = FileAccess::resolve(&ctx.cwd, args.path.as_deref().unwrap_or("."));
        let root = self.access.check_read(&root)?;
        if !root.is_dir() {
            return Err(ToolError::Failed(format!(
                "{} is not a directory",
                root.display()
            )));
        }
        let matcher = GlobBuilder::new(&args.pattern)
            .literal_separator(false)
            .build()
            .map_err(|e| ToolError::InvalidArgs(format!("invalid glob pattern: {e}")))?
            .compile_matcher();
        let access = Arc::clone(&self.access);
        let cwd = ctx.cwd.clone();
        let pattern = args.pattern.clone();
        tokio::task::spawn_blocking(move || {
            let mut found: Vec<(SystemTime, std::path::PathBuf)> = walk::files(&root, &access)
                .into_iter()
                .filter(|p| p.strip_prefix(&root).is_ok_and(|rel| matcher.is_match(rel)))
                .map(|p| {
                    let mtime = p
                        .metadata()
                        .and_then(|m| m.modified())
                        .unwrap_or(SystemTime::UNIX_EPOCH);
                    (mtime, p)
                })
                .collect();
            if found.is_empty() {
                return Ok(format!("No files match {pattern} under {}.", root.display()));
            }
            found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
            let total = found.len();
            let mut out: String = found
                .iter()
                .take(MAX_RESULTS)
                .map(|(_, p)| walk::display(p, &cwd) + "\n")
                .collect();
            if total > MAX_RESULTS {
                out.push_str(&format!(
                    "[{MAX_RESULTS} of {total} matches shown, newest first; narrow the pattern or the path]\n"
                ));
            }
            Ok(out)
        })
        .await
        .map_err(|e| ToolError::Failed(format!("glob failed: {e}")))?
    }
}
