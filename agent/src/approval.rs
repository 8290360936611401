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
    /// Why the call needs approval.
    pub reason: String,
    /// What would let calls like this run without asking (a mode, a rule), for an approver
    /// that cannot ask anyone.
    pub remedy: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalDecision {
    Allow,
    /// Allow, and allow calls like it for the rest of the session.
    AllowAlways,
    Deny {
        feedback: Option<String>,
    },
    /// Nobody could be asked (headless): the call does not run, and `message` tells the model
    /// what happened and what would let such a call run.
    Unanswerable {
        message: String,
    },
}

#[async_trait::async_trait]
pub trait Approver: Send + Sync {
    async fn approve(&self, request: ApprovalRequest) -> ApprovalDecision;
}

/// Headless runs have nobody to ask: every Ask is refused, with why the call needed approval
/// and what would let it run (which differs: accept-edits only helps edits, commands need an
/// allow rule or bypass, outside paths need a person).
pub struct HeadlessApprover;

/// What the model is told when a call that needs approval is refused headless.
pub fn headless_message(request: &ApprovalRequest) -> String {
    format!(
        "{}, and in headless mode nobody can approve it. {}",
        request.reason, request.remedy
    )
}

#[async_trait::async_trait]
impl Approver for HeadlessApprover {
    async fn approve(&self, request: ApprovalRequest) -> ApprovalDecision {
        ApprovalDecision::Unanswerable {
            message: headless_message(&request),
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
