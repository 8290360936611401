//! `grep`: find files, or lines, by regular expression.

use std::io::Read;
use std::sync::Arc;

use anvil_llm::text::Limit;
use globset::GlobBuilder;
use regex::RegexBuilder;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::file_access::FileAccess;
use crate::tool::{Cancellation, Effects, ToolContext, ToolError, TypedTool};
use crate::tools::walk;

const MAX_FILES: usize = 200;
const MAX_LINES: usize = 200;
const MAX_LINE_CHARS: usize = 300;
/// Larger files are skipped: they are data, not source.
const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;

#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema)]
#[schemars(inline)]
#[serde(rename_all = "snake_case")]
pub enum GrepMode {
    /// List the files that contain a match.
    #[default]
    Files,
    /// Show matching lines as `path:line:text`.
    Content,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepArgs {
    /// A regular expression (Rust regex syntax), e.g. `fn\s+main` or `TODO|FIXME`.
    pub pattern: String,
    /// The directory or file to search. Default: the working directory.
    #[serde(default)]
    pub path: Option<String>,
    /// Only search files whose path matches this glob, e.g. `*.rs` or `src/**/*.py`.
    #[serde(default)]
    pub glob: Option<String>,
    /// Match without regard to case. Default false.
    #[serde(default)]
    pub case_insensitive: Option<bool>,
    /// `files` (default) lists matching files; `content` shows matching lines.
    #[serde(default)]
    pub mode: Option<GrepMode>,
}

pub struct GrepTool {
    access: Arc<FileAccess>,
}

impl GrepTool {
    pub fn new(access: Arc<FileAccess>) -> Self {
        Self { access }
    }
}

#[async_trait::async_trait]
impl TypedTool for GrepTool {
    type Args = GrepArgs;
    const NAME: &'static str = "grep";
    const EFFECTS: Effects = Effects::READ_ONLY;
    const CANCELLATION: Cancellation = Cancellation::Immediate;

    fn description(&self) -> &str {
        "Search file contents with a regular expression. mode `files` (default) lists the files \
         that match; mode `content` shows `path:line:text` for each matching line. Narrow with \
         path and glob (`*.rs`). Prefer it over grep or rg in bash. Binary files, files ignored \
         by .gitignore, .git/, target/ and credential files are skipped; at most 200 files or \
         200 lines are shown."
    }

    fn permission_subject(&self, args: &serde_json::Value) -> Option<String> {
        args.get("path")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    }

    async fn run(&self, args: GrepArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let regex = RegexBuilder::new(&args.pattern)
            .case_insensitive(args.case_insensitive.unwrap_or(false))
            .build()
            .map_err(|e| ToolError::InvalidArgs(format!("invalid regex: {e}")))?;
        let filter = match &args.glob {
            Some(g) => Some(
                GlobBuilder::new(g)
                    .literal_separator(false)
                    .build()
                    .map_err(|e| ToolError::InvalidArgs(format!("invalid glob: {e}")))?
                    .compile_matcher(),
            ),
            None => None,
        };
        let root = FileAccess::resolve(&ctx.cwd, args.path.as_deref().unwrap_or("."));
        let root = self.access.check_read(&root)?;
        let access = Arc::clone(&self.access);
        let cwd = ctx.cwd.clone();
        let mode = args.mode.unwrap_or_default();
        let pattern = args.pattern.clone();
        tokio::task::spawn_blocking(move || {
            let candidates = if root.is_file() {
                vec![root.clone()]
            } else {
                walk::files(&root, &access)
            };
            let mut files = Vec::new();
            let mut lines = Vec::new();
            let mut more_lines = false;
            for path in candidates {
                if let Some(f) = &filter {
                    let rel = path.strip_prefix(&root).unwrap_or(&path);
                    let name_only = path.file_name().map(std::path::Path::new);
                    if !f.is_match(rel) && !name_only.is_some_and(|n| f.is_match(n)) {
                        continue;
                    }
                }
                let Some(text) = read_text(&path) else { continue };
                let shown = walk::display(&path, &cwd);
                match mode {
                    GrepMode::Files => {
                        if regex.is_match(&text) {
                            files.push(shown);
                        }
                    }
                    GrepMode::Content => {
                        for (i, line) in text.lines().enumerate() {
                            if regex.is_match(line) {
                                if lines.len() == MAX_LINES {
                                    more_lines = true;
                                    break;
                                }
                                let line = Limit::chars(MAX_LINE_CHARS).apply(line);
                                lines.push(format!(
                                    "{shown}:{}:{}",
                                    i + 1,
                                    line.with_marker("")
                                ));
                            }
                        }
                    }
                }
                if more_lines {
                    break;
                }
            }
            let out = match mode {
                GrepMode::Files if files.is_empty() => format!("No files match /{pattern}/."),
                GrepMode::Files => {
                    files.sort();
                    let total = files.len();
                    let mut out: String = files.iter().take(MAX_FILES).map(|f| f.clone() + "\n").collect();
                    if total > MAX_FILES {
                        out.push_str(&format!("[{MAX_FILES} of {total} files shown; narrow path or glob]\n"));
                    }
                    out
                }
                GrepMode::Content if lines.is_empty() => format!("No lines match /{pattern}/."),
                GrepMode::Content => {
                    let mut out = lines.join("\n");
                    out.push('\n');
                    if more_lines {
                        out.push_str(&format!("[first {MAX_LINES} matching lines shown; narrow path, glob or pattern]\n"));
                    }
                    out
                }
            };
            Ok(out)
        })
        .await
        .map_err(|e| ToolError::Failed(format!("grep failed: {e}")))?
    }
}

/// The file as text, or `None` for binary, unreadable or huge files.
fn read_text(path: &std::path::Path) -> Option<String> {
    let meta = path.metadata().ok()?;
    if meta.len() > MAX_FILE_BYTES {
        return None;
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    std::fs::File::open(path)
        .ok()?
        .read_to_end(&mut bytes)
        .ok()?;
    if bytes[..bytes.len().min(8 * 1024)].contains(&0) {
        return None;
    }
    Some(String::from_utf8_lossy(&bytes).into_owned())
}
