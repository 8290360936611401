//! Approvals: who answers when the policy says Ask.
//!
//! An approver answers allow once, allow always (a session rule is added), or deny with
//! optional feedback for the model. Whatever an approver does not explicitly allow is denied:
//! an approver that is dropped, fails or is cancelled never grants anything.

use std::collections::VecDeque;
use std::sync::Mutex;

use serde_json::Value;

/// What the user is asked about.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRequest {
    pub tool: String,
    pub args: Value,
    pub subject: Option<String>,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalDecision {
    Allow,
    /// Allow, and allow calls like it for the rest of the session.
    AllowAlways,
    Deny {
        feedback: Option<String>,
    },
}

#[async_trait::async_trait]
pub trait Approver: Send + Sync {
    async fn approve(&self, request: ApprovalRequest) -> ApprovalDecision;
}

/// Headless runs have nobody to ask: every Ask is a Deny, with what to do instead.
pub struct HeadlessApprover;

pub const HEADLESS_DENIAL: &str = "This action requires approval, which isn't available in headless mode. Re-run with --permission-mode accept-edits or add an allow rule.";

#[async_trait::async_trait]
impl Approver for HeadlessApprover {
    async fn approve(&self, _request: ApprovalRequest) -> ApprovalDecision {
        ApprovalDecision::Deny {
            feedback: Some(HEADLESS_DENIAL.into()),
        }
    }
}

/// Scripted answers, in order, for tests; records every request. Out of answers: deny.
#[derive(Default)]
pub struct ScriptedApprover {
    answers: Mutex<VecDeque<ApprovalDecision>>,
    requests: Mutex<Vec<ApprovalRequest>>,
}

impl ScriptedApprover {
    pub fn new(answers: Vec<ApprovalDecision>) -> Self {
        Self {
            answers: Mutex::new(answers.into()),
            requests: Mutex::new(Vec::new()),
        }
    }

    pub fn requests(&self) -> Vec<ApprovalRequest> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

#[async_trait::async_trait]
impl Approver for ScriptedApprover {
    async fn approve(&self, request: ApprovalRequest) -> ApprovalDecision {
        if let Ok(mut r) = self.requests.lock() {
            r.push(request);
        }
        self.answers
            .lock()
            .ok()
            .and_then(|mut a| a.pop_front())
            .unwrap_or(ApprovalDecision::Deny { feedback: None })
    }
}
