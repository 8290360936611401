//! Git plumbing for `anvil auto`, through the git CLI with an explicit environment.
//!
//! **Every command** runs with an emptied environment (no `GIT_DIR`, `GIT_INDEX_FILE`,
//! `GIT_WORK_TREE` or anything else of the parent's; only `PATH`), no system or global
//! config (`GIT_CONFIG_NOSYSTEM`, `GIT_CONFIG_GLOBAL=/dev/null`), no hooks
//! (`core.hooksPath=/dev/null`, which also silences the reference-transaction hook), no
//! fsmonitor, no signing, no automatic gc or maintenance, and a fixed author and committer
//! ([`AUTHOR_NAME`], [`AUTHOR_EMAIL`]). The repository's own config is read (its filters and
//! attributes are the user's); the global one is not, so a filter configured only there (LFS
//! installed globally) does not run.
//!
//! **The user's repository** gains refs and objects, nothing else: `auto/<run>` (the run
//! branch, moved only by [`Repo::merge`], always by compare-and-swap) and
//! `anvil-work/<run>/s<N>a<attempt>` (one per live attempt, at its candidate commit). Its
//! checkout, index, HEAD, stash and their reflogs are never touched: a tree is built in a
//! private index file (`GIT_INDEX_FILE` in a temporary directory), never the user's.
//!
//! **An attempt's worktree** ([`Repo::add_worktree`]) is a directory outside the user's
//! checkout holding a repository of its own, on branch `anvil-work/<run>/s<N>a<attempt>`,
//! which borrows the user's objects read-only (`objects/info/alternates`). It is deliberately
//! not a linked worktree (`git worktree add`): a linked worktree shares the user's refs and
//! config, so `git branch -f auto/<run>` or `git update-ref` run by the agent inside it would
//! move the run branch, and a `git config` there would change the user's repository. In a
//! repository of its own, `reset --hard`, `branch -f`, `update-ref` and config edits change
//! only the attempt. The harness never runs git with the attempt's repository as `GIT_DIR`
//! after the agent has had it (its config is the agent's): [`Repo::commit_worktree`] reads
//! the attempt's files into the user's repository as a work tree, with the user's config.
//! (The agent's sandbox must still keep the user's `.git` read-only: a `git push` to it by
//! path is a filesystem write, not a git permission.)
//!
//! **The harness index** of a worktree lives beside it (`s<N>a<k>.index`), where the agent
//! cannot write: the checkout writes it, [`Repo::commit_worktree`] reads the files through it
//! (its stat data — all of it, ctime included, whatever the repository's config says — spares
//! hashing the files the agent did not touch; a file changed and dated back still has a new
//! ctime).
//!
//! **Reuse.** Beside the harness index a checkout leaves a copy of the index it wrote
//! (`s<N>a<k>.checkout-index`) and, last, its stamp ([`scrub`]). An attempt that ended is
//! **parked** ([`Repo::park_worktree`]) with those two, and the next attempt's
//! [`Repo::reuse_worktree`] brings that tree to its base: [`scrub::scrub`] first removes
//! everything changed since the checkout by ctime — so nothing a session did that git cannot
//! see (a rewrite that cleans to the same blob under its own `.gitattributes`, a mode git does
//! not track, an xattr, a directory's mode) survives — then a fresh repository of its own,
//! `read-tree -u --reset` from the checkout's index (which writes the missing and the
//! changed), then everything that is not a tracked path removed. Any doubt (a stamp of
//! another umask or user, a changed file left, a `.gitattributes` written or removed — the
//! files kept were converted under the old ones — a directory that cannot be read) and the
//! tree is thrown away for a fresh checkout. Only an attempt whose agent has ended is parked;
//! a dead attempt's worktree is saved as a patch and removed, so a process outliving its
//! attempt never writes into the next one's tree.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anvil_grader::protect::ProtectedPaths;

use crate::auto::ids::{AttemptId, RunId};
use crate::auto::run_state::SessionKind;
use crate::auto::scrub;

pub const AUTHOR_NAME: &str = "anvil auto";
pub const AUTHOR_EMAIL: &str = "anvil-auto@localhost";

/// A git object id (hex).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Oid(String);

impl Oid {
    /// `hex` as an object id, if it is one (40 or 64 lowercase hex digits).
    pub fn parse(hex: &str) -> Option<Self> {
        let hex = hex.trim();
        ((hex.len() == 40 || hex.len() == 64)
            && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .then(|| Self(hex.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Oid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("git {step} in {}: {reason}", .dir.display())]
    Command {
        step: String,
        dir: PathBuf,
        reason: String,
    },
    #[error("{} is not inside a git repository with a checkout: {reason}", .dir.display())]
    NotARepository { dir: PathBuf, reason: String },
    #[error(
        "the attempt's worktree {} would be inside the checkout {}: it must be outside",
        .dir.display(), .checkout.display()
    )]
    InsideCheckout { dir: PathBuf, checkout: PathBuf },
    #[error("the attempt's worktree {} already exists", .dir.display())]
    WorktreeExists { dir: PathBuf },
    #[error("{refname} is at {found}, not at {expected}: another process moved it")]
    RefMoved {
        refname: String,
        expected: String,
        found: String,
    },
    #[error("{refname} exists already at {found}")]
    RefExists { refname: String, found: Oid },
    #[error("{refname} does not exist")]
    NoRef { refname: String },
    #[error("{what} {}: {source}", .path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

impl GitError {
    /// Whether git refused the files of an attempt's worktree when they were snapshotted (a
    /// nested repository without a commit, a file it cannot read): the session's doing, not
    /// the infrastructure's. Failures to run git at all are `Io`, never this.
    pub fn is_worktree_content(&self) -> bool {
        matches!(self, GitError::Command { step, .. } if step == "snapshot")
    }
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> GitError + 'a {
    move |source| GitError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// The user's repository.
#[derive(Debug, Clone)]
pub struct Repo {
    /// The checkout's top level.
    checkout: PathBuf,
    /// The common git directory (the main one, also when opened from a linked worktree).
    git_dir: PathBuf,
}

/// One git invocation: arguments, a private index, a work tree, input.
struct Git<'a> {
    git_dir: &'a Path,
    work_tree: Option<&'a Path>,
    index: Option<&'a Path>,
    dates: Option<String>,
    step: &'a str,
}

impl<'a> Git<'a> {
    fn new(git_dir: &'a Path, step: &'a str) -> Self {
        Self {
            git_dir,
            work_tree: None,
            index: None,
            dates: None,
            step,
        }
    }

    fn work_tree(mut self, dir: &'a Path) -> Self {
        self.work_tree = Some(dir);
        self
    }

    fn index(mut self, file: &'a Path) -> Self {
        self.index = Some(file);
        self
    }

    fn dates(mut self, date: String) -> Self {
        self.dates = Some(date);
        self
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = scrubbed();
        c.arg("--git-dir").arg(self.git_dir);
        c.current_dir(self.git_dir);
        if let Some(w) = self.work_tree {
            // In the work tree's top: paths are relative to it, never to a directory inside.
            c.arg("--work-tree").arg(w).current_dir(w);
        }
        c.args(args);
        if let Some(i) = self.index {
            c.env("GIT_INDEX_FILE", i);
        }
        if let Some(d) = &self.dates {
            c.env("GIT_AUTHOR_DATE", d).env("GIT_COMMITTER_DATE", d);
        }
        c
    }

    fn fail(&self, reason: String) -> GitError {
        GitError::Command {
            step: self.step.to_string(),
            dir: self.git_dir.to_path_buf(),
            reason,
        }
    }

    /// Runs and returns stdout; a failure carries git's stderr.
    fn run(&self, args: &[&str]) -> Result<Vec<u8>, GitError> {
        self.run_with(args, None)
    }

    fn run_with(&self, args: &[&str], input: Option<&[u8]>) -> Result<Vec<u8>, GitError> {
        let out = self.output(args, input)?;
        if out.status.success() {
            Ok(out.stdout)
        } else {
            Err(self.fail(String::from_utf8_lossy(&out.stderr).trim().to_string()))
        }
    }

    fn output(&self, args: &[&str], input: Option<&[u8]>) -> Result<Output, GitError> {
        let mut c = self.command(args);
        c.stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = c
            .spawn()
            .map_err(|e| self.fail(format!("cannot run git: {e} (is git installed?)")))?;
        if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
            // A git that exits early closes its end; what it said is in its stderr.
            let _ = stdin.write_all(bytes);
        }
        child
            .wait_with_output()
            .map_err(|e| self.fail(format!("cannot wait for git: {e}")))
    }

    fn text(&self, args: &[&str]) -> Result<String, GitError> {
        Ok(String::from_utf8_lossy(&self.run(args)?).trim().to_string())
    }

    fn oid(&self, args: &[&str]) -> Result<Oid, GitError> {
        let text = self.text(args)?;
        Oid::parse(&text).ok_or_else(|| self.fail(format!("not an object id: {text:?}")))
    }
}

/// `git` with nothing of this process's environment but PATH, and no config, hooks or
/// signing beyond the repository's own config (see the module docs).
fn scrubbed() -> Command {
    let mut c = Command::new("git");
    c.env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        c.env("PATH", path);
    }
    c.env("LC_ALL", "C")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_AUTHOR_NAME", AUTHOR_NAME)
        .env("GIT_AUTHOR_EMAIL", AUTHOR_EMAIL)
        .env("GIT_COMMITTER_NAME", AUTHOR_NAME)
        .env("GIT_COMMITTER_EMAIL", AUTHOR_EMAIL)
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
            // Stat data decides which files are re-read: all of it, whatever the repository
            // says (a file the agent changed and dated back still has a new ctime).
            "-c",
            "core.trustctime=true",
            "-c",
            "core.checkStat=default",
            "-c",
            "core.ignoreStat=false",
            "-c",
            "core.untrackedCache=false",
            "-c",
            "core.splitIndex=false",
            "-c",
            "commit.gpgsign=false",
            "-c",
            "tag.gpgsign=false",
            "-c",
            "gc.auto=0",
            "-c",
            "maintenance.auto=false",
            "-c",
            "core.pager=cat",
            "-c",
            "color.ui=never",
        ]);
    c
}

/// An attempt's worktree (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worktree {
    pub dir: PathBuf,
    pub run: RunId,
    pub attempt: AttemptId,
    /// The run branch's commit the attempt started from.
    pub base: Oid,
    /// `anvil-work/<run>/s<N>a<attempt>`.
    pub branch: String,
}

impl Worktree {
    /// The harness's index of the worktree: beside it, out of the agent's reach.
    pub fn index(&self) -> PathBuf {
        index_beside(&self.dir)
    }
}

/// A change the harness makes to a candidate's tree before it lands on the run branch.
#[derive(Debug, Clone)]
pub enum TreeEdit {
    /// The file at `path` gets `contents` (mode 100644): `features.json` as the harness
    /// writes it back.
    Write { path: String, contents: Vec<u8> },
    /// Every path `protected` covers becomes exactly what it is in `from`: a session's edits
    /// to protected tests are reverted.
    Restore {
        from: Oid,
        protected: ProtectedPaths,
    },
}

/// Moving the run branch to a validated session.
#[derive(Debug, Clone)]
pub struct MergeRequest<'a> {
    pub run: &'a RunId,
    pub session: u32,
    /// The initializer's merge accepts the contract (session 0, or a re-run's number).
    pub kind: SessionKind,
    /// Where the run branch is now (compare-and-swap).
    pub expected: &'a Oid,
    /// The session's candidate commit.
    pub candidate: &'a Oid,
    /// The features it newly verified.
    pub verified: &'a [String],
    /// What it cost; `None`: unknown.
    pub cost_usd: Option<f64>,
    pub edits: &'a [TreeEdit],
}

/// What [`Repo::merge`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Merged {
    /// The run branch moved from the expected commit to this one.
    Moved(Oid),
    /// The run branch was at this commit already: the same merge was done before.
    AlreadyThere(Oid),
    /// The session's tree (after the edits) is the run branch's: nothing to commit.
    Unchanged,
}

impl Merged {
    /// The run branch's commit after the merge, given where it was expected.
    pub fn head<'a>(&'a self, expected: &'a Oid) -> &'a Oid {
        match self {
            Merged::Moved(oid) | Merged::AlreadyThere(oid) => oid,
            Merged::Unchanged => expected,
        }
    }
}

/// The commit message of a merge: `auto(s<N>): verify F…` and the trailers.
pub fn merge_message(
    run: &RunId,
    session: u32,
    kind: SessionKind,
    verified: &[String],
    cost_usd: Option<f64>,
    candidate: &Oid,
) -> String {
    let title = if kind == SessionKind::Initializer {
        format!("auto(s{session}): accept the contract")
    } else if verified.is_empty() {
        format!("auto(s{session}): no feature verified")
    } else {
        format!("auto(s{session}): verify {}", verified.join(", "))
    };
    let cost = match cost_usd {
        Some(usd) => format!("{usd:.4} USD"),
        None => "unknown".to_string(),
    };
    let verified = if verified.is_empty() {
        "none".to_string()
    } else {
        verified.join(", ")
    };
    format!(
        "{title}\n\nAnvil-Run: {run}\nAnvil-Session: {session}\nAnvil-Verified: {verified}\nAnvil-Cost: {cost}\nAnvil-Candidate: {candidate}\n"
    )
}

/// An object `git cat-file --batch` printed.
struct Object {
    oid: Oid,
    kind: String,
    data: Vec<u8>,
}

/// The committer's time (seconds since the epoch) in a commit object.
fn committer_time(commit: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(commit).ok()?;
    let line = text
        .lines()
        .take_while(|l| !l.is_empty())
        .find(|l| l.starts_with("committer "))?;
    let mut fields = line.rsplit(' ');
    let _zone = fields.next()?;
    let time = fields.next()?;
    time.bytes().all(|b| b.is_ascii_digit()).then_some(time)
}

/// A private index file, removed with its directory.
struct PrivateIndex {
    dir: tempfile::TempDir,
}

impl PrivateIndex {
    fn new() -> Result<Self, GitError> {
        let dir = tempfile::Builder::new()
            .prefix("anvil-auto-index-")
            .tempdir()
            .map_err(io("cannot make a private index in", &std::env::temp_dir()))?;
        Ok(Self { dir })
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("index")
    }
}

fn zero_separated(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    bytes.split(|b| *b == 0).filter(|s| !s.is_empty())
}

impl Repo {
    /// The repository whose checkout holds `dir`.
    pub fn open(dir: &Path) -> Result<Self, GitError> {
        let not_a_repo = |reason: String| GitError::NotARepository {
            dir: dir.to_path_buf(),
            reason,
        };
        let out = scrubbed()
            .args([
                "rev-parse",
                "--path-format=absolute",
                "--show-toplevel",
                "--git-common-dir",
            ])
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| not_a_repo(format!("cannot run git: {e} (is git installed?)")))?;
        if !out.status.success() {
            return Err(not_a_repo(
                String::from_utf8_lossy(&out.stderr).trim().to_string(),
            ));
        }
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut lines = text.lines();
        let (Some(checkout), Some(git_dir)) = (lines.next(), lines.next()) else {
            return Err(not_a_repo("it has no checkout (a bare repository?)".into()));
        };
        let canonical = |p: &str| {
            Path::new(p)
                .canonicalize()
                .map_err(|e| not_a_repo(format!("{p}: {e}")))
        };
        Ok(Self {
            checkout: canonical(checkout)?,
            git_dir: canonical(git_dir)?,
        })
    }

    pub fn checkout(&self) -> &Path {
        &self.checkout
    }

    pub fn git_dir(&self) -> &Path {
        &self.git_dir
    }

    fn git<'a>(&'a self, step: &'a str) -> Git<'a> {
        Git::new(&self.git_dir, step)
    }

    /// The commit `rev` names (never an option: a `rev` starting with `-` is refused).
    pub fn resolve(&self, rev: &str) -> Result<Oid, GitError> {
        let git = self.git("rev-parse");
        if rev.starts_with('-') {
            return Err(git.fail(format!("{rev:?} is not a revision")));
        }
        let spec = format!("{rev}^{{commit}}");
        git.oid(&["rev-parse", "--verify", "--quiet", &spec])
    }

    /// Where `refs/heads/<branch>` points, if it exists.
    pub fn branch(&self, branch: &str) -> Result<Option<Oid>, GitError> {
        let refname = format!("refs/heads/{branch}");
        let git = self.git("rev-parse");
        let out = git.output(&["rev-parse", "--verify", "--quiet", &refname], None)?;
        match out.status.code() {
            Some(0) => Ok(Oid::parse(&String::from_utf8_lossy(&out.stdout))),
            Some(1) => Ok(None),
            _ => Err(git.fail(String::from_utf8_lossy(&out.stderr).trim().to_string())),
        }
    }

    /// `git cat-file --batch` of `specs`, in one process: each one's object, or `None` when
    /// it names none.
    fn objects(&self, step: &str, specs: &[String]) -> Result<Vec<Option<Object>>, GitError> {
        let git = self.git(step);
        let mut input = Vec::new();
        for spec in specs {
            if spec.contains('\n') {
                return Err(git.fail(format!("{spec:?} is not an object name")));
            }
            input.extend_from_slice(spec.as_bytes());
            input.push(b'\n');
        }
        let out = git.run_with(&["cat-file", "--batch"], Some(&input))?;
        let mut rest = out.as_slice();
        let mut found = Vec::with_capacity(specs.len());
        for spec in specs {
            let bad = || git.fail(format!("unexpected `cat-file --batch` output for {spec:?}"));
            let end = rest.iter().position(|b| *b == b'\n').ok_or_else(bad)?;
            let header = String::from_utf8_lossy(&rest[..end]).into_owned();
            rest = &rest[end + 1..];
            let fields: Vec<&str> = header.split(' ').collect();
            let [oid, kind, size] = fields.as_slice() else {
                // `<spec> missing`, `<spec> ambiguous`.
                found.push(None);
                continue;
            };
            let oid = Oid::parse(oid).ok_or_else(bad)?;
            let size: usize = size.parse().map_err(|_| bad())?;
            if rest.len() < size + 1 {
                return Err(bad());
            }
            found.push(Some(Object {
                oid,
                kind: kind.to_string(),
                data: rest[..size].to_vec(),
            }));
            rest = &rest[size + 1..];
        }
        Ok(found)
    }

    /// Creates `refs/heads/<branch>` at `at`; it must not exist (compare-and-swap against
    /// nothing), unless it is at `at` already.
    fn create_branch(&self, branch: &str, at: &Oid, why: &str) -> Result<(), GitError> {
        let refname = format!("refs/heads/{branch}");
        let result =
            self.git("update-ref")
                .run(&["update-ref", "-m", why, &refname, at.as_str(), ""]);
        match (result, self.branch(branch)?) {
            (Ok(_), _) => Ok(()),
            (Err(_), Some(found)) if &found == at => Ok(()),
            (Err(_), Some(found)) => Err(GitError::RefExists { refname, found }),
            (Err(e), None) => Err(e),
        }
    }

    /// Creates the run branch `auto/<run>` at `at` (the commit the run starts from). Doing it
    /// again at the same commit is a no-op; at another, an error.
    pub fn create_run_branch(&self, run: &RunId, at: &Oid) -> Result<(), GitError> {
        self.create_branch(&run.run_branch(), at, "anvil auto: run started")
    }

    /// Adds the worktree of `attempt` at `dir` (outside the checkout, not existing yet), on
    /// branch `anvil-work/<run>/s<N>a<attempt>` at `base` (see the module docs): every file
    /// written afresh.
    pub fn add_worktree(
        &self,
        run: &RunId,
        attempt: AttemptId,
        base: &Oid,
        dir: &Path,
    ) -> Result<Worktree, GitError> {
        self.open_worktree(run, attempt, base, dir, None)
    }

    /// [`Repo::add_worktree`], starting from the tree an earlier attempt left parked at
    /// `parked` ([`Repo::park_worktree`]) when there is one: only the files that differ from
    /// `base` are written, everything the index of `base` does not hold is removed, and a
    /// tree that cannot be brought exactly to `base` (a file changed since it was parked, a
    /// directory that cannot be read) is thrown away for a fresh checkout. Either way the
    /// attempt starts from exactly `base`'s files.
    pub fn reuse_worktree(
        &self,
        run: &RunId,
        attempt: AttemptId,
        base: &Oid,
        dir: &Path,
        parked: &Path,
    ) -> Result<Worktree, GitError> {
        self.open_worktree(run, attempt, base, dir, Some(parked))
    }

    fn open_worktree(
        &self,
        run: &RunId,
        attempt: AttemptId,
        base: &Oid,
        dir: &Path,
        parked: Option<&Path>,
    ) -> Result<Worktree, GitError> {
        let dir = resolve_new(dir)?;
        if dir.starts_with(&self.checkout) || self.checkout.starts_with(&dir) {
            return Err(GitError::InsideCheckout {
                dir,
                checkout: self.checkout.clone(),
            });
        }
        if dir.symlink_metadata().is_ok() {
            return Err(GitError::WorktreeExists { dir });
        }
        let parent = dir.parent().unwrap_or(Path::new("/"));
        std::fs::create_dir_all(parent).map_err(io("cannot create", parent))?;
        let branch = run.work_branch(attempt);
        self.create_branch(&branch, base, "anvil auto: attempt started")?;
        let index = index_beside(&dir);
        remove_file(&index)?;
        let warm = match parked {
            Some(parked) if unpark(parked, &dir, &index)? => {
                match self.refresh(&dir, &index, &branch, base) {
                    Ok(true) => true,
                    Ok(false) => {
                        tracing::debug!("a parked worktree is not reused: it is not certain");
                        false
                    }
                    Err(e) => {
                        tracing::debug!("a parked worktree is not reused: {e}");
                        false
                    }
                }
            }
            _ => false,
        };
        let own = dir.join(".git");
        if !warm {
            remove_all(&dir)?;
            remove_file(&index)?;
            std::fs::create_dir(&dir).map_err(io("cannot create", &dir))?;
            self.init_own(&dir, &branch, base)?;
            Git::new(&own, "worktree checkout")
                .work_tree(&dir)
                .index(&index)
                .run(&["read-tree", "-u", "--reset", base.as_str()])?;
        }
        // The agent's own repository gets the same index, so its `git status` is clean; the
        // checkout's index is kept for the next attempt's reuse, and the stamp written last.
        let copy = own.join("index");
        std::fs::copy(&index, &copy).map_err(io("cannot write", &copy))?;
        let checkout = checkout_index_beside(&dir);
        std::fs::copy(&index, &checkout).map_err(io("cannot write", &checkout))?;
        let stamp = scrub::stamp_beside(&dir);
        scrub::write_stamp(&dir, &checkout).map_err(io("cannot write", &stamp))?;
        Ok(Worktree {
            dir,
            run: run.clone(),
            attempt,
            base: base.clone(),
            branch,
        })
    }

    /// A repository of its own in `dir/.git` (any earlier one removed), borrowing the user's
    /// objects, on `branch` at `base`: `init` without the user's `--git-dir`.
    fn init_own(&self, dir: &Path, branch: &str, base: &Oid) -> Result<(), GitError> {
        let own = dir.join(".git");
        remove_all(&own)?;
        let init = scrubbed()
            .args(["init", "--quiet", "--template=", "--initial-branch", branch])
            .arg(dir)
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| GitError::Command {
                step: "init".into(),
                dir: dir.to_path_buf(),
                reason: format!("cannot run git: {e} (is git installed?)"),
            })?;
        if !init.status.success() {
            return Err(GitError::Command {
                step: "init".into(),
                dir: dir.to_path_buf(),
                reason: String::from_utf8_lossy(&init.stderr).trim().to_string(),
            });
        }
        let info = own.join("objects/info");
        std::fs::create_dir_all(&info).map_err(io("cannot create", &info))?;
        let alternates = info.join("alternates");
        std::fs::write(
            &alternates,
            format!("{}\n", self.git_dir.join("objects").display()),
        )
        .map_err(io("cannot write", &alternates))?;
        // The branch as a loose ref (gitrepository-layout): what `update-ref` would write in
        // a repository that has no packed refs, without another git process.
        let reference = own.join("refs/heads").join(branch);
        if let Some(up) = reference.parent() {
            std::fs::create_dir_all(up).map_err(io("cannot create", up))?;
        }
        std::fs::write(&reference, format!("{base}\n")).map_err(io("cannot write", &reference))?;
        Ok(())
    }

    /// Brings an unparked tree in `dir`, whose index `index` is the one its checkout wrote,
    /// to exactly `base`: everything changed since that checkout removed ([`scrub::scrub`]),
    /// a fresh repository of its own, `read-tree -u --reset` (only the files that differ or
    /// are missing are written), then nothing but `base`'s files. `false` when that cannot be
    /// made certain (then the caller checks out afresh).
    fn refresh(
        &self,
        dir: &Path,
        index: &Path,
        branch: &str,
        base: &Oid,
    ) -> Result<bool, GitError> {
        let spare = spare_beside(dir);
        let scrubbed = scrub::scrub(dir, &spare);
        remove_all(&spare)?;
        let Some(scrubbed) = scrubbed.map_err(io("cannot scrub", dir))? else {
            return Ok(false);
        };
        self.init_own(dir, branch, base)?;
        let own = dir.join(".git");
        let git = Git::new(&own, "worktree refresh")
            .work_tree(dir)
            .index(index);
        git.run(&["read-tree", "-u", "--reset", base.as_str()])?;
        // Every tracked path (`H`), and those whose file is not the index's (`C`: changed,
        // `R`: removed) — which `read-tree` should have rewritten; if one is left, this tree
        // is not trusted. Anything on stderr (a directory git could not read) neither.
        let listed = git.output(&["ls-files", "-z", "-t", "-c", "-m", "-d"], None)?;
        if !listed.status.success() || !listed.stderr.is_empty() {
            return Ok(false);
        }
        let mut tracked = std::collections::HashSet::new();
        for entry in zero_separated(&listed.stdout) {
            match entry.split_first() {
                Some((b'H', rest)) if rest.first() == Some(&b' ') => {
                    tracked.insert(&rest[1..]);
                }
                _ => return Ok(false),
            }
        }
        // The files that stayed were converted under the `.gitattributes` that stayed: if
        // `read-tree` wrote or removed one, a fresh checkout would convert them otherwise.
        if !scrubbed.keeps_attributes(dir, tracked.iter().copied()) {
            return Ok(false);
        }
        let mut parents: std::collections::HashSet<&[u8]> = std::collections::HashSet::new();
        for path in &tracked {
            for (i, b) in path.iter().enumerate() {
                if *b == b'/' {
                    parents.insert(&path[..i]);
                }
            }
        }
        remove_untracked(dir, &tracked, &parents)
    }

    /// The tree of the worktree's files as they are (its `.gitignore` honoured), read into the
    /// user's repository through the attempt's harness index (beside the worktree, out of the
    /// agent's reach; its stat data spares hashing the files that did not change), or, when
    /// it has none, a private index started from the attempt's base. Afterwards the index
    /// holds the files as they are, so the tree can be parked.
    fn snapshot(&self, wt: &Worktree) -> Result<Oid, GitError> {
        let harness = wt.index();
        let private;
        let path = if harness.is_file() {
            harness
        } else {
            private = PrivateIndex::new()?;
            let path = private.path();
            self.git("snapshot index")
                .index(&path)
                .run(&["read-tree", wt.base.as_str()])?;
            path
        };
        let git = self.git("snapshot").index(&path).work_tree(&wt.dir);
        // Tracked files are updated even where ignored; untracked ignored ones stay out.
        git.run(&["add", "--all"])?;
        git.oid(&["write-tree"])
    }

    /// Commits the worktree's files as they are (whatever the agent did with its own git) onto
    /// the attempt's branch in the user's repository; returns the candidate commit. With
    /// nothing changed since the branch's commit, that commit.
    pub fn commit_worktree(&self, wt: &Worktree, message: &str) -> Result<Oid, GitError> {
        let tree = self.snapshot(wt)?;
        let refname = format!("refs/heads/{}", wt.branch);
        let found = self.objects(
            "cat-file",
            &[refname.clone(), format!("{refname}^{{tree}}")],
        )?;
        let (Some(Some(head)), Some(Some(head_tree))) = (found.first(), found.get(1)) else {
            return Err(GitError::NoRef { refname });
        };
        let head = head.oid.clone();
        if head_tree.oid == tree {
            return Ok(head);
        }
        let commit = self.git("commit-tree").oid(&[
            "commit-tree",
            tree.as_str(),
            "-p",
            head.as_str(),
            "-m",
            message,
        ])?;
        self.git("update-ref").run(&[
            "update-ref",
            "-m",
            "anvil auto: candidate",
            &refname,
            commit.as_str(),
            head.as_str(),
        ])?;
        Ok(commit)
    }

    /// The paths that differ between two commits (no rename detection).
    pub fn changed_paths(&self, from: &Oid, to: &Oid) -> Result<Vec<String>, GitError> {
        let out = self.git("diff-tree").run(&[
            "diff-tree",
            "-r",
            "-z",
            "--name-only",
            "--no-renames",
            from.as_str(),
            to.as_str(),
        ])?;
        Ok(zero_separated(&out)
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect())
    }

    /// The bytes of `path` at `commit`; `None` when it has no such file.
    pub fn read_file(&self, commit: &Oid, path: &str) -> Result<Option<Vec<u8>>, GitError> {
        let found = self.objects("cat-file", &[format!("{commit}:{path}")])?;
        Ok(found
            .into_iter()
            .next()
            .flatten()
            .filter(|o| o.kind == "blob")
            .map(|o| o.data))
    }

    /// `git log --oneline -<n>` of `rev` (for the status block of a worker's first request).
    pub fn log_oneline(&self, rev: &Oid, n: usize) -> Result<String, GitError> {
        self.git("log").text(&[
            "log",
            "--oneline",
            "--no-decorate",
            &format!("-{n}"),
            rev.as_str(),
        ])
    }

    /// The total size of the files in `commit`'s tree (`git ls-tree -r -l`), in bytes.
    pub fn tree_bytes(&self, commit: &Oid) -> Result<u64, GitError> {
        let out = self
            .git("ls-tree")
            .run(&["ls-tree", "-r", "-l", "-z", commit.as_str()])?;
        // `<mode> <type> <object> <size>\t<path>`; a submodule's size is `-`.
        Ok(zero_separated(&out)
            .filter_map(|entry| {
                let meta = entry.split(|b| *b == b'\t').next()?;
                let size = meta
                    .split(|b| *b == b' ')
                    .filter(|f| !f.is_empty())
                    .nth(3)?;
                std::str::from_utf8(size).ok()?.parse::<u64>().ok()
            })
            .sum())
    }

    /// Writes the tree of `commit` into `dir` (created; it should be empty), through a private
    /// index: the tree a verify step grades.
    pub fn materialize(&self, commit: &Oid, dir: &Path) -> Result<(), GitError> {
        std::fs::create_dir_all(dir).map_err(io("cannot create", dir))?;
        let index = PrivateIndex::new()?;
        let path = index.path();
        let git = self.git("materialize").index(&path).work_tree(dir);
        git.run(&["read-tree", commit.as_str()])?;
        git.run(&["checkout-index", "--all", "--force"])?;
        Ok(())
    }

    /// Moves the run branch to the validated session (see [`MergeRequest`]): a commit of the
    /// candidate's tree with `edits` applied, on top of `expected`, with the message of
    /// [`merge_message`] and the candidate's dates, so the same request always makes the same
    /// commit. Moving is a compare-and-swap from `expected`; a branch already at that commit is
    /// left alone (the merge was done, and its record lost), and one anywhere else is an error.
    pub fn merge(&self, m: &MergeRequest<'_>) -> Result<Merged, GitError> {
        let branch = m.run.run_branch();
        let refname = format!("refs/heads/{branch}");
        let index = PrivateIndex::new()?;
        let path = index.path();
        let git = self.git("merge").index(&path);
        git.run(&["read-tree", m.candidate.as_str()])?;
        for edit in m.edits {
            self.apply_edit(&git, edit)?;
        }
        let tree = git.oid(&["write-tree"])?;
        let found = self.objects(
            "cat-file",
            &[
                refname.clone(),
                format!("{}^{{tree}}", m.expected),
                format!("{}^{{commit}}", m.candidate),
            ],
        )?;
        let (current, expected_tree, candidate) = match found.as_slice() {
            [Some(c), Some(e), Some(k)] => (c, e, k),
            [None, ..] => {
                return Err(GitError::NoRef {
                    refname: refname.clone(),
                });
            }
            _ => {
                return Err(git.fail(format!(
                    "{} or {} is not a commit of this repository",
                    m.expected, m.candidate
                )));
            }
        };
        let current = current.oid.clone();
        let date = committer_time(&candidate.data)
            .ok_or_else(|| git.fail(format!("{} has no committer time", m.candidate)))?
            .to_string();
        if tree == expected_tree.oid {
            return if &current == m.expected {
                Ok(Merged::Unchanged)
            } else {
                Err(GitError::RefMoved {
                    refname,
                    expected: m.expected.to_string(),
                    found: current.to_string(),
                })
            };
        }
        let message = merge_message(
            m.run,
            m.session,
            m.kind,
            m.verified,
            m.cost_usd,
            m.candidate,
        );
        let commit = self
            .git("commit-tree")
            .dates(format!("@{date} +0000"))
            .oid(&[
                "commit-tree",
                tree.as_str(),
                "-p",
                m.expected.as_str(),
                "-m",
                &message,
            ])?;
        if current == commit {
            return Ok(Merged::AlreadyThere(commit));
        }
        if &current != m.expected {
            return Err(GitError::RefMoved {
                refname,
                expected: m.expected.to_string(),
                found: current.to_string(),
            });
        }
        let reflog = format!("anvil auto: s{}", m.session);
        match self.git("update-ref").run(&[
            "update-ref",
            "-m",
            &reflog,
            &refname,
            commit.as_str(),
            m.expected.as_str(),
        ]) {
            Ok(_) => Ok(Merged::Moved(commit)),
            Err(e) => match self.branch(&branch)? {
                Some(found) if found == commit => Ok(Merged::AlreadyThere(commit)),
                Some(found) => Err(GitError::RefMoved {
                    refname,
                    expected: m.expected.to_string(),
                    found: found.to_string(),
                }),
                None => Err(e),
            },
        }
    }

    fn apply_edit(&self, git: &Git<'_>, edit: &TreeEdit) -> Result<(), GitError> {
        match edit {
            TreeEdit::Write { path, contents } => {
                let blob = Oid::parse(&String::from_utf8_lossy(&git.run_with(
                    &["hash-object", "-w", "--no-filters", "--stdin"],
                    Some(contents),
                )?))
                .ok_or_else(|| git.fail("hash-object printed no object id".into()))?;
                let info = format!("100644,{blob},{path}");
                // `--replace`: a directory the session put at `path` goes.
                git.run(&["update-index", "--add", "--replace", "--cacheinfo", &info])?;
            }
            TreeEdit::Restore { from, protected } => {
                let listed = git.run(&["ls-files", "-z"])?;
                let mut remove = Vec::new();
                for path in zero_separated(&listed) {
                    if protected.covers(&String::from_utf8_lossy(path)) {
                        remove.extend_from_slice(path);
                        remove.push(0);
                    }
                }
                if !remove.is_empty() {
                    git.run_with(
                        &["update-index", "--force-remove", "-z", "--stdin"],
                        Some(&remove),
                    )?;
                }
                let tree = git.run(&["ls-tree", "-r", "-z", "--full-tree", from.as_str()])?;
                let mut add = Vec::new();
                for line in zero_separated(&tree) {
                    let Some(tab) = line.iter().position(|b| *b == b'\t') else {
                        continue;
                    };
                    if protected.covers(&String::from_utf8_lossy(&line[tab + 1..])) {
                        add.extend_from_slice(line);
                        add.push(0);
                    }
                }
                if !add.is_empty() {
                    git.run_with(&["update-index", "-z", "--index-info"], Some(&add))?;
                }
            }
        }
        Ok(())
    }

    /// Saves what the worktree holds beyond its base as a binary patch at `to` (a dead
    /// attempt's leftovers, never merged). Returns whether there was anything to save; with
    /// nothing, no file is written.
    pub fn save_patch(&self, wt: &Worktree, to: &Path) -> Result<bool, GitError> {
        let tree = self.snapshot(wt)?;
        let patch = self.git("diff-tree").run(&[
            "diff-tree",
            "-p",
            "--binary",
            "--full-index",
            "--no-renames",
            wt.base.as_str(),
            tree.as_str(),
        ])?;
        if patch.is_empty() {
            return Ok(false);
        }
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(io("cannot create", parent))?;
        }
        std::fs::write(to, patch).map_err(io("cannot write", to))?;
        Ok(true)
    }

    /// Removes the worktree's directory (whatever the agent left in it), its harness index
    /// and its branch in the user's repository.
    pub fn remove_worktree(&self, wt: &Worktree) -> Result<(), GitError> {
        remove_all(&wt.dir)?;
        remove_file(&wt.index())?;
        remove_file(&checkout_index_beside(&wt.dir))?;
        remove_file(&scrub::stamp_beside(&wt.dir))?;
        self.remove_work_branch(wt)
    }

    /// Parks the worktree of an attempt that ended (its agent's processes gone) at `parked`,
    /// with the index its checkout wrote and its stamp, for [`Repo::reuse_worktree`] of the
    /// next attempt; what was parked there before is removed, and so are the attempt's branch
    /// and its harness index (a snapshot's, read under the session's `.gitattributes`).
    /// Without the checkout's index and stamp the worktree is removed instead.
    pub fn park_worktree(&self, wt: &Worktree, parked: &Path) -> Result<(), GitError> {
        self.remove_work_branch(wt)?;
        discard_parked(parked)?;
        remove_file(&wt.index())?;
        let checkout = checkout_index_beside(&wt.dir);
        let stamp = scrub::stamp_beside(&wt.dir);
        if !checkout.is_file() || !stamp.is_file() {
            remove_file(&checkout)?;
            remove_file(&stamp)?;
            return remove_all(&wt.dir);
        }
        if let Some(up) = parked.parent() {
            std::fs::create_dir_all(up).map_err(io("cannot create", up))?;
        }
        let moves = [
            (wt.dir.clone(), parked.to_path_buf()),
            (checkout, index_beside(parked)),
            (stamp, scrub::stamp_beside(parked)),
        ];
        for (from, to) in &moves {
            if let Err(e) = std::fs::rename(from, to) {
                discard_parked(parked)?;
                for (from, _) in &moves {
                    remove_all(from)?;
                }
                return Err(io("cannot park", from)(e));
            }
        }
        Ok(())
    }

    fn remove_work_branch(&self, wt: &Worktree) -> Result<(), GitError> {
        let refname = format!("refs/heads/{}", wt.branch);
        if self.branch(&wt.branch)?.is_some() {
            self.git("update-ref")
                .run(&["update-ref", "-d", &refname])?;
        }
        Ok(())
    }
}

/// The harness's index of the worktree at `dir`: beside it, so outside what the agent can
/// write.
fn index_beside(dir: &Path) -> PathBuf {
    beside(dir, ".index")
}

/// The index the checkout of the worktree at `dir` wrote, kept beside it for the next
/// attempt's reuse (the harness index moves on with each snapshot).
fn checkout_index_beside(dir: &Path) -> PathBuf {
    beside(dir, ".checkout-index")
}

/// Where the scrub of the worktree at `dir` makes new directories.
fn spare_beside(dir: &Path) -> PathBuf {
    beside(dir, ".spare")
}

fn beside(dir: &Path, suffix: &str) -> PathBuf {
    let mut name = dir.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Removes a parked tree and its index (the run ended).
pub fn discard_parked(parked: &Path) -> Result<(), GitError> {
    remove_all(parked)?;
    remove_file(&index_beside(parked))?;
    remove_file(&scrub::stamp_beside(parked))
}

/// Moves a parked tree, its checkout's index and its stamp to `dir`, `index` and `dir`'s
/// stamp; `false` when nothing usable is parked (no directory — a link is not one — no
/// index or no stamp).
fn unpark(parked: &Path, dir: &Path, index: &Path) -> Result<bool, GitError> {
    let parked_index = index_beside(parked);
    let parked_stamp = scrub::stamp_beside(parked);
    let usable = parked.symlink_metadata().is_ok_and(|m| m.is_dir())
        && parked_index.symlink_metadata().is_ok_and(|m| m.is_file())
        && parked_stamp.symlink_metadata().is_ok_and(|m| m.is_file());
    if !usable {
        return Ok(false);
    }
    let stamp = scrub::stamp_beside(dir);
    std::fs::rename(parked, dir).map_err(io("cannot unpark", parked))?;
    std::fs::rename(&parked_index, index).map_err(io("cannot unpark", &parked_index))?;
    std::fs::rename(&parked_stamp, &stamp).map_err(io("cannot unpark", &parked_stamp))?;
    Ok(true)
}

/// Removes everything under `dir` but its `.git` that is neither a tracked path nor a
/// directory holding one: files of other kinds (a fifo, a socket) even at a tracked path.
/// `false` when a directory cannot be read.
fn remove_untracked(
    dir: &Path,
    tracked: &std::collections::HashSet<&[u8]>,
    parents: &std::collections::HashSet<&[u8]>,
) -> Result<bool, GitError> {
    use std::os::unix::ffi::OsStrExt;
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(dir.join(&rel)) else {
            return Ok(false);
        };
        for entry in entries {
            let Ok(entry) = entry else {
                return Ok(false);
            };
            let path = rel.join(entry.file_name());
            if rel.as_os_str().is_empty() && entry.file_name() == ".git" {
                continue;
            }
            let Ok(kind) = entry.file_type() else {
                return Ok(false);
            };
            let key = path.as_os_str().as_bytes();
            if kind.is_dir() && parents.contains(key) {
                stack.push(path);
            } else if (kind.is_file() || kind.is_symlink()) && tracked.contains(key) {
            } else if kind.is_dir() && tracked.contains(key) {
                // A submodule's place: empty, as a checkout leaves it.
                let full = dir.join(&path);
                remove_all(&full)?;
                std::fs::create_dir(&full).map_err(io("cannot create", &full))?;
            } else {
                let full = dir.join(&path);
                if kind.is_dir() {
                    remove_all(&full)?;
                } else {
                    std::fs::remove_file(&full).map_err(io("cannot remove", &full))?;
                }
            }
        }
    }
    Ok(true)
}

/// Removes a file; one that does not exist is fine.
fn remove_file(path: &Path) -> Result<(), GitError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("cannot remove", path)(e)),
        _ => Ok(()),
    }
}

/// Where `dir` (which may not exist yet) is: made absolute, `.` and `..` taken lexically,
/// then its longest existing ancestor resolved (links followed) and the rest appended. The
/// harness uses this path from then on, so what it checks is what it creates.
fn resolve_new(dir: &Path) -> Result<PathBuf, GitError> {
    use std::path::Component;
    let absolute = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(io("cannot resolve", dir))?
            .join(dir)
    };
    let mut lexical = PathBuf::new();
    for c in absolute.components() {
        match c {
            Component::ParentDir => {
                lexical.pop();
            }
            Component::CurDir => {}
            Component::Prefix(_) | Component::RootDir | Component::Normal(_) => lexical.push(c),
        }
    }
    let mut existing = lexical.as_path();
    let mut rest = Vec::new();
    while existing.symlink_metadata().is_err() {
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(up)) => {
                rest.push(name.to_os_string());
                existing = up;
            }
            _ => break,
        }
    }
    let mut resolved = existing
        .canonicalize()
        .map_err(io("cannot resolve", existing))?;
    resolved.extend(rest.iter().rev());
    Ok(resolved)
}

/// `rm -rf`, also through directories the agent made unwritable.
fn remove_all(dir: &Path) -> Result<(), GitError> {
    scrub::remove_all(dir).map_err(io("cannot remove", dir))
}
