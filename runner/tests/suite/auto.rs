//! `anvil auto`'s foundation against real git and real bubblewrap: the run branch, attempt
//! worktrees, candidates, the compare-and-swap merge and dead attempts' patches leave the
//! user's checkout, index, stash, HEAD and reflog exactly as they were, and git run by the
//! agent inside its worktree cannot move the run branch; the verify step grades a commit with
//! the accepted protected tests laid back over whatever the session did to them.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use anvil_grader::GradeOptions;
use anvil_grader::protect::ProtectedPaths;
use anvil_runner::auto::contract::{self, Contract};
use anvil_runner::auto::git::{GitError, MergeRequest, Merged, Oid, Repo, TreeEdit, merge_message};
use anvil_runner::auto::ids::{AttemptId, RunId};
use anvil_runner::auto::run_state::SessionKind;
use anvil_runner::auto::verdict::{self, CheckOutcome, SessionChecks};
use anvil_runner::auto::verify::{self, Verifier};
use anvil_test_support::home::{Home, git};

/// `git ARGS` in `dir` as a user (or an agent) would run it; its stdout.
fn git_out(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=agent",
            "-c",
            "user.email=agent@example.com",
        ])
        .args(args)
        .current_dir(dir)
        // Reading the status must not refresh (rewrite) the index being compared.
        .env("GIT_OPTIONAL_LOCKS", "0")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn write(dir: &Path, rel: &str, body: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, body).unwrap();
}

fn read(dir: &Path, rel: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(rel)).ok()
}

/// Every file under `dir` but `.git`, with its bytes.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            if entry.file_name() == ".git" {
                continue;
            }
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// What of the user's repository must not change, read without writing anything.
#[derive(Debug, PartialEq)]
struct UserState {
    /// The index file's bytes, hashed.
    index: String,
    head_file: String,
    head_reflog: String,
    branch_reflogs: BTreeMap<String, String>,
    config: String,
    checkout: BTreeMap<String, String>,
    status: String,
    stash: String,
    refs: BTreeSet<String>,
}

fn user_state(repo: &Path) -> UserState {
    let dot = repo.join(".git");
    let branch_reflogs = files(&dot.join("logs/refs"))
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8(v).unwrap()))
        .collect();
    UserState {
        index: {
            use sha2::Digest;
            hex::encode(sha2::Sha256::digest(
                std::fs::read(dot.join("index")).unwrap(),
            ))
        },
        head_file: read(&dot, "HEAD").unwrap(),
        head_reflog: read(&dot, "logs/HEAD").unwrap(),
        branch_reflogs,
        config: read(&dot, "config").unwrap(),
        checkout: files(repo)
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned()))
            .collect(),
        status: git_out(
            repo,
            &[
                "status",
                "--porcelain=v2",
                "--branch",
                "--untracked-files=all",
            ],
        ),
        stash: git_out(repo, &["stash", "list", "--format=%H %s"]),
        refs: git_out(repo, &["for-each-ref", "--format=%(refname) %(objectname)"])
            .lines()
            .map(String::from)
            .collect(),
    }
}

/// A user's repository mid-work: a stash, an unstaged edit, a staged new file, an untracked
/// file.
fn messy_repo(home: &Home) -> PathBuf {
    let repo = home.git_repo(
        "repo",
        &[
            ("src/lib.rs", "v1\n"),
            ("tests/t.sh", "exit 1\n"),
            ("README.md", "readme\n"),
        ],
    );
    write(&repo, "README.md", "stash me\n");
    git(&repo, &["stash", "-q"]);
    write(&repo, "src/lib.rs", "the user's unstaged edit\n");
    write(&repo, "staged.txt", "staged\n");
    git(&repo, &["add", "staged.txt"]);
    write(&repo, "untracked.txt", "untracked\n");
    repo
}

fn refs_without(state: &UserState, prefix: &str) -> BTreeSet<String> {
    state
        .refs
        .iter()
        .filter(|r| !r.starts_with(prefix))
        .cloned()
        .collect()
}

fn parent(dir: &Path, commit: &Oid) -> String {
    git_out(dir, &["rev-parse", &format!("{commit}^")])
        .trim()
        .to_string()
}

#[test]
fn the_users_checkout_index_stash_head_and_reflog_are_untouched() {
    let home = Home::new();
    let repo = messy_repo(&home);
    let before = user_state(&repo);

    let r = Repo::open(&repo.join("src")).unwrap();
    let head = r.resolve("HEAD").unwrap();
    let run = RunId::new("r1").unwrap();
    r.create_run_branch(&run, &head).unwrap();
    r.create_run_branch(&run, &head).unwrap(); // again: a no-op
    let attempts = tempfile::tempdir().unwrap();
    let wt = r
        .add_worktree(
            &run,
            AttemptId::new(1, 1),
            &head,
            &attempts.path().join("s1a1"),
        )
        .unwrap();
    assert_eq!(wt.branch, "anvil-work/r1/s1a1");
    // The attempt starts from the commit, not from the user's uncommitted work.
    assert_eq!(read(&wt.dir, "src/lib.rs").as_deref(), Some("v1\n"));
    assert_eq!(read(&wt.dir, "README.md").as_deref(), Some("readme\n"));
    assert_eq!(read(&wt.dir, "staged.txt"), None);
    assert_eq!(read(&wt.dir, "untracked.txt"), None);
    assert_eq!(git_out(&wt.dir, &["status", "--porcelain"]), "");

    // The agent works, commits with its own git, and edits a protected test.
    write(&wt.dir, "src/lib.rs", "v2\n");
    write(&wt.dir, "src/new.rs", "new\n");
    std::fs::remove_file(wt.dir.join("README.md")).unwrap();
    write(&wt.dir, ".gitignore", "target/\n");
    write(&wt.dir, "target/junk", "build output\n");
    write(&wt.dir, "tests/t.sh", "exit 0\n");
    git_out(&wt.dir, &["add", "-A"]);
    git_out(&wt.dir, &["commit", "-qm", "the agent's commit"]);
    write(&wt.dir, "notes.md", "uncommitted progress notes\n");

    let candidate = r.commit_worktree(&wt, "s1a1: candidate").unwrap();
    assert_eq!(
        r.branch("anvil-work/r1/s1a1").unwrap(),
        Some(candidate.clone())
    );
    assert_eq!(parent(&repo, &candidate), head.as_str());
    assert_eq!(
        r.changed_paths(&head, &candidate).unwrap(),
        vec![
            ".gitignore",
            "README.md",
            "notes.md",
            "src/lib.rs",
            "src/new.rs",
            "tests/t.sh"
        ],
        "everything the agent did, committed or not, and nothing it ignored"
    );
    assert_eq!(
        r.commit_worktree(&wt, "again").unwrap(),
        candidate,
        "nothing changed: the same candidate"
    );

    let protected = ProtectedPaths::new(&["tests/".to_string()]).unwrap();
    let edits = [
        TreeEdit::Restore {
            from: head.clone(),
            protected: protected.clone(),
        },
        TreeEdit::Write {
            path: "features.json".into(),
            contents: b"{\"harness\": true}\n".to_vec(),
        },
    ];
    let verified = vec!["F1".to_string()];
    let request = MergeRequest {
        run: &run,
        session: 1,
        kind: SessionKind::Worker,
        expected: &head,
        candidate: &candidate,
        verified: &verified,
        cost_usd: Some(0.25),
        edits: &edits,
    };
    let Merged::Moved(merged) = r.merge(&request).unwrap() else {
        panic!("the first merge moves the run branch")
    };
    assert_eq!(r.branch("auto/r1").unwrap(), Some(merged.clone()));
    assert_eq!(parent(&repo, &merged), head.as_str());
    assert_eq!(
        git_out(&repo, &["log", "-1", "--format=%B", merged.as_str()]).trim_end(),
        merge_message(
            &run,
            1,
            SessionKind::Worker,
            &verified,
            Some(0.25),
            &candidate
        )
        .trim_end()
    );
    assert_eq!(
        git_out(
            &repo,
            &["log", "-1", "--format=%an <%ae>|%cn <%ce>", merged.as_str()]
        )
        .trim(),
        "anvil auto <anvil-auto@localhost>|anvil auto <anvil-auto@localhost>"
    );
    assert_eq!(
        git_out(
            &repo,
            &[
                "log",
                "-1",
                "--format=%(trailers:only,unfold)",
                merged.as_str()
            ],
        )
        .trim_end(),
        format!(
            "Anvil-Run: r1\nAnvil-Session: 1\nAnvil-Verified: F1\nAnvil-Cost: 0.2500 USD\nAnvil-Candidate: {candidate}"
        ),
        "git reads the trailers"
    );
    assert_eq!(
        git_out(&repo, &["log", "-1", "--format=%s", merged.as_str()]).trim(),
        "auto(s1): verify F1"
    );
    let show = |path: &str| {
        r.read_file(&merged, path)
            .unwrap()
            .map(|b| String::from_utf8(b).unwrap())
    };
    assert_eq!(
        show("tests/t.sh").as_deref(),
        Some("exit 1\n"),
        "the protected edit reverted"
    );
    assert_eq!(
        show("features.json").as_deref(),
        Some("{\"harness\": true}\n")
    );
    assert_eq!(show("src/lib.rs").as_deref(), Some("v2\n"));
    assert_eq!(show("README.md"), None);
    assert_eq!(show("target/junk"), None);

    // Redone (a crash between the merge and its record): the same commit, nothing moves.
    assert_eq!(
        r.merge(&request).unwrap(),
        Merged::AlreadyThere(merged.clone())
    );
    let run_reflog = read(&repo.join(".git"), "logs/refs/heads/auto/r1").unwrap();
    assert_eq!(
        run_reflog.lines().count(),
        2,
        "created, then moved once: {run_reflog}"
    );

    // A merge from a stale base is refused, whatever its candidate.
    write(&wt.dir, "src/lib.rs", "v3\n");
    let second = r.commit_worktree(&wt, "s1a1: more").unwrap();
    assert_ne!(second, candidate);
    let stale = MergeRequest {
        candidate: &second,
        ..request.clone()
    };
    assert!(
        matches!(r.merge(&stale), Err(GitError::RefMoved { .. })),
        "compare-and-swap from the old head"
    );
    assert_eq!(r.branch("auto/r1").unwrap(), Some(merged.clone()));

    r.remove_worktree(&wt).unwrap();
    assert!(!wt.dir.exists());
    assert_eq!(r.branch("anvil-work/r1/s1a1").unwrap(), None);

    let after = user_state(&repo);
    let new_refs: BTreeSet<String> = after.refs.difference(&before.refs).cloned().collect();
    assert_eq!(
        new_refs,
        BTreeSet::from([format!("refs/heads/auto/r1 {merged}")]),
        "the run branch is the only new ref"
    );
    assert_eq!(refs_without(&after, "refs/heads/auto/"), before.refs);
    let mut after_logs = after.branch_reflogs.clone();
    assert!(after_logs.remove("heads/auto/r1").is_some());
    assert!(after_logs.remove("heads/anvil-work/r1/s1a1").is_none());
    assert_eq!(after_logs, before.branch_reflogs);
    assert_eq!(
        UserState {
            refs: before.refs.clone(),
            branch_reflogs: before.branch_reflogs.clone(),
            ..after
        },
        before
    );
}

#[test]
fn git_inside_the_attempt_cannot_move_the_run_branch() {
    let home = Home::new();
    let repo = home.git_repo("repo", &[("a.txt", "a\n")]);
    let r = Repo::open(&repo).unwrap();
    let head = r.resolve("HEAD").unwrap();
    let run = RunId::new("r2").unwrap();
    r.create_run_branch(&run, &head).unwrap();
    let before = user_state(&repo);
    let attempts = tempfile::tempdir().unwrap();
    let wt = r
        .add_worktree(
            &run,
            AttemptId::new(1, 1),
            &head,
            &attempts.path().join("s1a1"),
        )
        .unwrap();

    write(&wt.dir, "a.txt", "rewritten history\n");
    git_out(&wt.dir, &["commit", "-qam", "agent"]);
    let agents = git_out(&wt.dir, &["rev-parse", "HEAD"]).trim().to_string();
    git_out(&wt.dir, &["branch", "-f", "auto/r2", "HEAD"]);
    git_out(&wt.dir, &["update-ref", "refs/heads/auto/r2", &agents]);
    git_out(&wt.dir, &["reset", "--hard", "HEAD~1"]);
    git_out(&wt.dir, &["checkout", "-q", "-B", "auto/r2", &agents]);
    git_out(&wt.dir, &["config", "core.hooksPath", "/tmp/evil-hooks"]);
    git_out(&wt.dir, &["config", "user.name", "evil"]);

    assert_eq!(r.branch("auto/r2").unwrap(), Some(head.clone()));
    let after = user_state(&repo);
    let new_refs: BTreeSet<String> = after.refs.difference(&before.refs).cloned().collect();
    assert_eq!(
        new_refs,
        BTreeSet::from([format!("refs/heads/anvil-work/r2/s1a1 {head}")]),
        "only the attempt's own branch, where the harness put it"
    );
    assert_eq!(
        after.config, before.config,
        "the agent's git config stayed in its attempt"
    );
    assert_eq!(after.head_reflog, before.head_reflog);
    assert_eq!(after.index, before.index);

    // What the agent's git did is still the candidate: its files as they are.
    let candidate = r.commit_worktree(&wt, "candidate").unwrap();
    assert_eq!(
        r.read_file(&candidate, "a.txt").unwrap(),
        Some(b"rewritten history\n".to_vec())
    );
    assert_eq!(r.branch("auto/r2").unwrap(), Some(head));
    r.remove_worktree(&wt).unwrap();
}

#[test]
fn a_worktree_inside_the_checkout_is_refused() {
    let home = Home::new();
    let repo = home.git_repo("repo", &[("a.txt", "a\n")]);
    let r = Repo::open(&repo).unwrap();
    let head = r.resolve("HEAD").unwrap();
    let run = RunId::new("r3").unwrap();
    for dir in [
        repo.join("wt"),
        repo.join("sub/../wt2"),
        home.path().to_path_buf(),
    ] {
        let err = r
            .add_worktree(&run, AttemptId::new(1, 1), &head, &dir)
            .unwrap_err();
        assert!(
            matches!(err, GitError::InsideCheckout { .. }),
            "{dir:?}: {err}"
        );
    }
    assert!(!repo.join("wt").exists());
    assert_eq!(
        r.branch("anvil-work/r3/s1a1").unwrap(),
        None,
        "no branch for a refused attempt"
    );
    assert!(matches!(
        Repo::open(home.path()),
        Err(GitError::NotARepository { .. })
    ));
}

#[test]
fn a_dead_attempts_leftovers_are_saved_as_a_patch_that_applies() {
    let home = Home::new();
    let repo = home.git_repo(
        "repo",
        &[
            ("keep.txt", "keep\n"),
            ("gone.txt", "gone\n"),
            ("edit.txt", "one\n"),
        ],
    );
    let r = Repo::open(&repo).unwrap();
    let head = r.resolve("HEAD").unwrap();
    let run = RunId::new("r4").unwrap();
    r.create_run_branch(&run, &head).unwrap();
    let attempts = tempfile::tempdir().unwrap();
    let dead = r
        .add_worktree(
            &run,
            AttemptId::new(2, 1),
            &head,
            &attempts.path().join("s2a1"),
        )
        .unwrap();
    std::fs::remove_file(dead.dir.join("gone.txt")).unwrap();
    write(&dead.dir, "edit.txt", "two\n");
    std::fs::write(dead.dir.join("blob.bin"), [0u8, 159, 146, 150, 0, 1, 2]).unwrap();

    let data = tempfile::tempdir().unwrap();
    let patch = data.path().join("leftovers/s2a1.patch");
    assert!(r.save_patch(&dead, &patch).unwrap());
    let target = tempfile::tempdir().unwrap();
    r.materialize(&head, target.path()).unwrap();
    assert_eq!(files(target.path()), files(&repo), "the base, written out");
    let applied = Command::new("git")
        .args(["apply", "--binary"])
        .arg(&patch)
        .current_dir(target.path())
        .output()
        .unwrap();
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    assert_eq!(files(target.path()), files(&dead.dir));
    assert_eq!(
        r.branch("auto/r4").unwrap(),
        Some(head.clone()),
        "never merged"
    );

    let idle = r
        .add_worktree(
            &run,
            AttemptId::new(2, 2),
            &head,
            &attempts.path().join("s2a2"),
        )
        .unwrap();
    let nothing = data.path().join("leftovers/s2a2.patch");
    assert!(!r.save_patch(&idle, &nothing).unwrap());
    assert!(!nothing.exists());
    r.remove_worktree(&dead).unwrap();
    r.remove_worktree(&idle).unwrap();
}

/// The tree of `commit`, as a fresh checkout writes it.
fn tree_files(r: &Repo, commit: &Oid) -> BTreeMap<String, Vec<u8>> {
    let out = tempfile::tempdir().unwrap();
    r.materialize(commit, out.path()).unwrap();
    files(out.path())
}

/// The attempt's worktree is exactly `base`: its files, its own repository's branch, a clean
/// `git status` there.
fn assert_exactly(r: &Repo, wt: &anvil_runner::auto::git::Worktree, base: &Oid, why: &str) {
    assert_eq!(files(&wt.dir), tree_files(r, base), "{why}");
    assert_eq!(
        git_out(&wt.dir, &["status", "--porcelain", "--ignored"]),
        "",
        "{why}"
    );
    assert_eq!(
        git_out(&wt.dir, &["rev-parse", "HEAD"]).trim(),
        base.as_str(),
        "{why}"
    );
}

/// Attempt `s<session>a1` of `run` from `base`, in `attempts`, from the tree parked there.
fn reuse(
    r: &Repo,
    run: &RunId,
    attempts: &Path,
    session: u32,
    base: &Oid,
) -> anvil_runner::auto::git::Worktree {
    r.reuse_worktree(
        run,
        AttemptId::new(session, 1),
        base,
        &attempts.join(format!("s{session}a1")),
        &attempts.join("parked"),
    )
    .unwrap()
}

#[test]
fn a_parked_worktree_starts_the_next_attempt_from_exactly_its_base() {
    let home = Home::new();
    let repo = home.git_repo(
        "repo",
        &[
            ("src/a.rs", "a\n"),
            ("src/deep/b.rs", "b\n"),
            ("tests/t.sh", "exit 1\n"),
            ("same.txt", "0123456789\n"),
        ],
    );
    let r = Repo::open(&repo).unwrap();
    let head = r.resolve("HEAD").unwrap();
    let run = RunId::new("r9").unwrap();
    r.create_run_branch(&run, &head).unwrap();
    let attempts = tempfile::tempdir().unwrap();
    let parked = attempts.path().join("parked");
    let first = reuse(&r, &run, attempts.path(), 1, &head);
    assert_exactly(&r, &first, &head, "nothing parked: a fresh checkout");

    // A session that leaves everything a model might: edits, a deletion, a new directory,
    // ignored build output, a nested repository, its own commits.
    write(&first.dir, "src/a.rs", "a, changed\n");
    std::fs::remove_file(first.dir.join("src/deep/b.rs")).unwrap();
    write(&first.dir, "src/new/c.rs", "c\n");
    write(&first.dir, ".gitignore", "target/\n*.log\n");
    write(&first.dir, "target/debug/app", "binary\n");
    write(&first.dir, "run.log", "log\n");
    write(&first.dir, "vendor/lib/x.txt", "x\n");
    git_out(&first.dir.join("vendor/lib"), &["init", "-q"]);
    git_out(&first.dir.join("vendor/lib"), &["add", "-A"]);
    git_out(&first.dir.join("vendor/lib"), &["commit", "-qm", "nested"]);
    git_out(&first.dir, &["add", "src"]);
    git_out(&first.dir, &["commit", "-qm", "the agent's own commit"]);
    let candidate = r.commit_worktree(&first, "s1a1: candidate").unwrap();
    r.park_worktree(&first, &parked).unwrap();
    assert!(!first.dir.exists() && parked.is_dir());
    assert_eq!(r.branch(&first.branch).unwrap(), None, "its branch is gone");

    // Rejected: the next attempt starts from the old base, none of it left.
    let second = reuse(&r, &run, attempts.path(), 2, &head);
    assert!(!parked.exists());
    assert_exactly(
        &r,
        &second,
        &head,
        "a rejected session's tree, back at the base",
    );
    r.commit_worktree(&second, "s2a1: nothing").unwrap();
    r.park_worktree(&second, &parked).unwrap();

    // Merged: from the candidate (as if it were the run branch's head).
    let third = reuse(&r, &run, attempts.path(), 3, &candidate);
    assert_exactly(&r, &third, &candidate, "forward to the merged tree");
    r.commit_worktree(&third, "s3a1: nothing").unwrap();
    r.park_worktree(&third, &parked).unwrap();

    // Whatever touches the parked tree afterwards (a process of the attempt that outlived
    // it): a tracked file rewritten to the same size and dated back, a fifo, a link out of
    // the tree where a tracked directory was, an unreadable directory.
    let same = parked.join("same.txt");
    let mtime = std::fs::metadata(&same).unwrap().modified().unwrap();
    std::fs::write(&same, "9876543210\n").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&same)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    assert!(
        Command::new("mkfifo")
            .arg(parked.join("pipe"))
            .status()
            .unwrap()
            .success()
    );
    std::fs::remove_dir_all(parked.join("src/new")).unwrap();
    std::os::unix::fs::symlink(home.path(), parked.join("src/new")).unwrap();
    write(&parked, "locked/inside.txt", "hidden\n");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            parked.join("locked"),
            std::fs::Permissions::from_mode(0o000),
        )
        .unwrap();
    }
    let fourth = reuse(&r, &run, attempts.path(), 4, &candidate);
    assert_exactly(
        &r,
        &fourth,
        &candidate,
        "a tree touched after it was parked",
    );
    assert!(
        home.path().join("src").symlink_metadata().is_err(),
        "nothing written through the link"
    );
    r.remove_worktree(&fourth).unwrap();
    assert!(!fourth.dir.exists() && !fourth.index().exists());
}

/// Everything of the tree at `dir` but its `.git` that a process could read: per path its
/// kind, mode bits (all twelve), owner, bytes or link target, and xattrs — one line each.
fn fingerprint(dir: &Path) -> String {
    const SCRIPT: &str = r#"
import hashlib, os, stat, sys
root = sys.argv[1]
for top, dirs, files in os.walk(root):
    if top == root and '.git' in dirs:
        dirs.remove('.git')
    dirs.sort()
    for name in sorted(dirs + files):
        path = os.path.join(top, name)
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            body = 'link ' + os.readlink(path)
        elif stat.S_ISREG(st.st_mode):
            body = 'file ' + hashlib.sha256(open(path, 'rb').read()).hexdigest()[:16]
        elif stat.S_ISDIR(st.st_mode):
            body = 'dir'
        else:
            body = 'other'
        try:
            attrs = sorted(os.listxattr(path, follow_symlinks=False))
        except OSError:
            attrs = ['?']
        print(os.path.relpath(path, root), oct(stat.S_IMODE(st.st_mode)), st.st_uid, st.st_gid, body, attrs)
"#;
    let out = Command::new("python3")
        .args(["-c", SCRIPT])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Sets the xattr `user.note` on `path`; `false` where the filesystem takes none.
fn set_xattr(path: &Path) -> bool {
    Command::new("python3")
        .args([
            "-c",
            "import os, sys; os.setxattr(sys.argv[1], 'user.note', b'for the next attempt', follow_symlinks=False)",
        ])
        .arg(path)
        .status()
        .unwrap()
        .success()
}

fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A session's changes that git cannot see (below); whether the xattrs took.
fn attack(dir: &Path) -> bool {
    write(
        dir,
        ".gitattributes",
        "crlf.txt text\nutf16.txt text working-tree-encoding=UTF-16\nident.txt ident\n",
    );
    std::fs::write(dir.join("crlf.txt"), "line one\r\nline two\r\n").unwrap();
    let mut utf16 = vec![0xff, 0xfe];
    utf16.extend("plain text\n".encode_utf16().flat_map(u16::to_le_bytes));
    std::fs::write(dir.join("utf16.txt"), utf16).unwrap();
    std::fs::write(dir.join("ident.txt"), "version $Id: a payload $\n").unwrap();
    chmod(&dir.join("mode.txt"), 0o600);
    chmod(&dir.join("src"), 0o700);
    chmod(&dir.join("src/deep"), 0o2775);
    set_xattr(&dir.join("src/deep/x.rs")) && set_xattr(&dir.join("src/deep"))
}

/// What the adversarial review found surviving a parked tree's reuse, each attack of it: a
/// session's `.gitattributes` under which its rewrites of tracked files (CRLF, UTF-16, an
/// expanded `$Id$`) clean to the base's blobs, so git sees no change; mode bits git does not
/// track, a directory's mode and setgid bit, xattrs on a file and a directory. The next
/// attempt's tree, from the same base (the session was not merged) and from the session's
/// candidate (it was), is exactly a fresh checkout's: the same bytes, modes, owners and
/// xattrs, path for path. (That the tree is reused, not checked out afresh, is asserted by
/// the end-to-end scenario and the bench: here every file is written within the same clock
/// tick as the index, and git takes such "racily clean" entries as changed and rewrites them,
/// so which inodes survive varies from run to run.)
#[test]
fn a_parked_worktree_keeps_nothing_of_a_session_that_git_cannot_see() {
    let home = Home::new();
    let repo = home.git_repo(
        "repo",
        &[
            ("crlf.txt", "line one\nline two\n"),
            ("utf16.txt", "plain text\n"),
            ("ident.txt", "version $Id$\n"),
            ("mode.txt", "mode\n"),
            ("src/deep/x.rs", "x\n"),
            ("src/untouched.rs", "untouched\n"),
        ],
    );
    let r = Repo::open(&repo).unwrap();
    let head = r.resolve("HEAD").unwrap();
    let run = RunId::new("r10").unwrap();
    r.create_run_branch(&run, &head).unwrap();
    let attempts = tempfile::tempdir().unwrap();
    let parked = attempts.path().join("parked");
    let first = reuse(&r, &run, attempts.path(), 1, &head);

    if !attack(&first.dir) {
        eprintln!("SKIPPED the xattr attacks: this filesystem takes no user xattrs");
    }
    let candidate = r.commit_worktree(&first, "s1a1: candidate").unwrap();
    // The attack works on git: only the attributes file is new in the candidate.
    assert_eq!(
        git_out(
            &repo,
            &["diff", "--name-only", head.as_str(), candidate.as_str()]
        ),
        ".gitattributes\n"
    );
    r.park_worktree(&first, &parked).unwrap();

    let fresh_dir = tempfile::tempdir().unwrap();
    let fresh = |base: &Oid, n: u32| {
        let wt = r
            .add_worktree(
                &run,
                AttemptId::new(90 + n, 1),
                base,
                &fresh_dir.path().join(n.to_string()),
            )
            .unwrap();
        let print = fingerprint(&wt.dir);
        r.remove_worktree(&wt).unwrap();
        print
    };

    // Not merged: back at the base.
    let second = reuse(&r, &run, attempts.path(), 2, &head);
    assert_eq!(
        fingerprint(&second.dir),
        fresh(&head, 1),
        "the rejected session's tree, at its base"
    );
    assert_exactly(&r, &second, &head, "and git agrees");

    // The same session's work again, then merged: the next attempt starts from its candidate
    // (a new `.gitattributes`: everything it converts must be as a checkout writes it).
    attack(&second.dir);
    let again = r.commit_worktree(&second, "s2a1: candidate").unwrap();
    assert_eq!(again, {
        // The same tree as the first candidate's, on another branch.
        let tree = |c: &Oid| git_out(&repo, &["rev-parse", &format!("{c}^{{tree}}")]);
        assert_eq!(tree(&again), tree(&candidate));
        again.clone()
    });
    r.park_worktree(&second, &parked).unwrap();
    let third = reuse(&r, &run, attempts.path(), 3, &candidate);
    assert_eq!(
        fingerprint(&third.dir),
        fresh(&candidate, 2),
        "forward to a tree with new attributes"
    );
    assert_exactly(&r, &third, &candidate, "and git agrees");
    r.remove_worktree(&third).unwrap();
}

/// A contract of three shell-checked features, `tests/` protected.
const CONTRACT: &str = r#"{"version": 1, "test_command": "sh tests/all.sh",
  "protected": ["tests/"],
  "features": [
    {"id": "F1", "description": "value is 1", "verify": {"cmd": "sh tests/f1.sh"}},
    {"id": "F2", "description": "other is 2", "verify": {"cmd": "sh tests/f2.sh"}},
    {"id": "F3", "description": "finishes quickly", "verify": {"cmd": "sh tests/f3.sh", "timeout_s": 1}}
  ]}"#;

#[tokio::test]
async fn the_verify_step_grades_a_commit_with_the_protected_tests_laid_over() {
    let home = Home::new();
    let repo = home.git_repo("repo", &[("README.md", "a project\n")]);
    let r = Repo::open(&repo).unwrap();
    let start = r.resolve("HEAD").unwrap();
    let run = RunId::new("r5").unwrap();
    r.create_run_branch(&run, &start).unwrap();
    let attempts = tempfile::tempdir().unwrap();

    // The initializer writes the contract and the tests; nothing is implemented yet.
    let init = r
        .add_worktree(
            &run,
            AttemptId::new(0, 1),
            &start,
            &attempts.path().join("s0a1"),
        )
        .unwrap();
    write(&init.dir, "features.json", CONTRACT);
    write(
        &init.dir,
        "tests/f1.sh",
        "test \"$(cat src/value 2>/dev/null)\" = 1\n",
    );
    write(
        &init.dir,
        "tests/f2.sh",
        "echo checking other; test \"$(cat src/other 2>/dev/null)\" = 2\n",
    );
    write(&init.dir, "tests/f3.sh", "test -f src/fast || sleep 30\n");
    let init_candidate = r.commit_worktree(&init, "s0a1").unwrap();
    let bytes = r
        .read_file(&init_candidate, contract::FEATURES_FILE)
        .unwrap()
        .unwrap();
    let contract = Contract::parse(Path::new(contract::FEATURES_FILE), &bytes)
        .unwrap()
        .accept(b"the spec");

    // Fail-before at the initializer's commit: no check passes before any work.
    let verifier = Verifier::new(&r, &init_candidate, &contract, GradeOptions::default()).unwrap();
    let at_init = verifier
        .check(&init_candidate, &contract.features)
        .await
        .unwrap();
    assert_eq!(
        verdict::fail_before(&contract, &verify::outcomes(&at_init)),
        Ok(vec![]),
        "{at_init:#?}"
    );
    let written = contract::restore(&contract, &BTreeSet::new()).unwrap();
    let edits = [TreeEdit::Write {
        path: contract::FEATURES_FILE.into(),
        contents: written.clone().into_bytes(),
    }];
    let accepted = match r
        .merge(&MergeRequest {
            run: &run,
            session: 0,
            kind: SessionKind::Initializer,
            expected: &start,
            candidate: &init_candidate,
            verified: &[],
            cost_usd: Some(0.1),
            edits: &edits,
        })
        .unwrap()
    {
        Merged::Moved(c) => c,
        other => panic!("{other:?}"),
    };
    r.remove_worktree(&init).unwrap();

    // A worker implements F1 and F3, gets F2 wrong, claims F2, and "fixes" F2's test.
    let worker = r
        .add_worktree(
            &run,
            AttemptId::new(1, 1),
            &accepted,
            &attempts.path().join("s1a1"),
        )
        .unwrap();
    write(&worker.dir, "src/value", "1\n");
    write(&worker.dir, "src/other", "3\n");
    write(&worker.dir, "src/fast", "\n");
    write(&worker.dir, "tests/f2.sh", "exit 0\n");
    let mut v: serde_json::Value = serde_json::from_str(&written).unwrap();
    v["features"][1]["passes"] = serde_json::json!(true);
    write(
        &worker.dir,
        "features.json",
        &serde_json::to_string_pretty(&v).unwrap(),
    );
    let candidate = r.commit_worktree(&worker, "s1a1").unwrap();

    let edited = r
        .read_file(&candidate, contract::FEATURES_FILE)
        .unwrap()
        .unwrap();
    let frozen = contract::freeze_check(&contract, &edited);
    assert_eq!(frozen.rejected, vec![]);
    let checked = verifier
        .check(&candidate, &contract.features)
        .await
        .unwrap();
    for c in checked.values() {
        assert_eq!(c.evidence.sandbox, "bubblewrap+seccomp", "{c:#?}");
        // The contract as accepted is laid over with the protected tests: no check sees
        // the session's claims.
        assert_eq!(
            c.evidence.laid_over.restored,
            vec!["features.json", "tests"]
        );
    }
    assert_eq!(
        checked["F1"].outcome,
        CheckOutcome::Passed,
        "{:#?}",
        checked["F1"]
    );
    let CheckOutcome::Failed { output } = &checked["F2"].outcome else {
        panic!("the edited test was laid back over: {:#?}", checked["F2"])
    };
    assert!(output.contains("checking other"), "{output}");
    assert_eq!(
        checked["F3"].outcome,
        CheckOutcome::Passed,
        "{:#?}",
        checked["F3"]
    );

    // At the initializer's commit F3's check ran out of time: the code's fail.
    assert!(
        matches!(at_init["F3"].outcome, CheckOutcome::TimedOut { .. }),
        "{:#?}",
        at_init["F3"]
    );

    let decided = verdict::decide(SessionChecks {
        contract: &contract,
        previously_verified: &BTreeSet::new(),
        claimed: &frozen.claimed(),
        results: &verify::outcomes(&checked),
        allow_regressions: false,
    })
    .unwrap();
    assert_eq!(decided.newly_verified, vec!["F1", "F3"]);
    assert_eq!(decided.false_claims, vec!["F2"]);
    assert_eq!(decided.unclaimed_verified, vec!["F1", "F3"]);
    assert!(decided.merge.merges());
    r.remove_worktree(&worker).unwrap();
}
