mod agent_loop;
mod bash;
mod fs_tools;
mod golden;
mod permissions;
mod sandbox_escape;
mod sandbox_limits;
mod sandbox_privilege;
