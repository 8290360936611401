//! The native tools, and the standard toolset of a coding session.

use std::sync::Arc;

use crate::file_access::FileAccess;
use crate::registry::{RegistryError, ToolRegistry};
use crate::sandbox::Sandbox;
use crate::secrets::ChildEnv;

pub mod bash;
pub mod calculator;
pub mod edit_file;
pub mod glob;
pub mod grep;
pub mod read_file;
mod walk;
pub mod write_file;

/// The names of the tools [`register_coding_tools`] registers (what `anvil --tools` and a
/// sweep variant's `tools` choose from).
pub const CODING_TOOLS: [&str; 6] = [
    <read_file::ReadFile as crate::tool::TypedTool>::NAME,
    <write_file::WriteFile as crate::tool::TypedTool>::NAME,
    <edit_file::EditFile as crate::tool::TypedTool>::NAME,
    <glob::GlobTool as crate::tool::TypedTool>::NAME,
    <grep::GrepTool as crate::tool::TypedTool>::NAME,
    <bash::Bash as crate::tool::TypedTool>::NAME,
];

/// Registers read_file, write_file, edit_file, glob, grep and bash, all sharing one
/// [`FileAccess`] (and so one freshness record); bash runs inside `sandbox` and redacts its
/// output with the registry's redactor as it reads it (set the redactor first).
pub fn register_coding_tools(
    registry: &mut ToolRegistry,
    access: Arc<FileAccess>,
    env: ChildEnv,
    sandbox: Arc<Sandbox>,
) -> Result<(), RegistryError> {
    registry.register(Arc::new(read_file::ReadFile::new(Arc::clone(&access))))?;
    registry.register(Arc::new(write_file::WriteFile::new(Arc::clone(&access))))?;
    registry.register(Arc::new(edit_file::EditFile::new(Arc::clone(&access))))?;
    registry.register(Arc::new(glob::GlobTool::new(Arc::clone(&access))))?;
    registry.register(Arc::new(grep::GrepTool::new(access)))?;
    let bash = bash::Bash::new(env, sandbox).with_redactor(registry.redactor());
    registry.register(Arc::new(bash))?;
    Ok(())
}
