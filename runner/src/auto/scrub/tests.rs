#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use super::*;

fn write(dir: &Path, rel: &str, body: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, body).unwrap();
}

fn ino(path: &Path) -> u64 {
    path.symlink_metadata().unwrap().ino()
}

fn mode(path: &Path) -> u32 {
    path.symlink_metadata().unwrap().mode() & 0o7777
}

/// Sets the xattr `user.note` on `path`; `false` where the filesystem has none.
fn set_xattr(path: &Path) -> bool {
    Command::new("python3")
        .args([
            "-c",
            "import os, sys; os.setxattr(sys.argv[1], 'user.note', b'left for the next attempt', follow_symlinks=False)",
        ])
        .arg(path)
        .status()
        .is_ok_and(|s| s.success())
}

fn xattrs(path: &Path) -> String {
    let out = Command::new("python3")
        .args([
            "-c",
            "import os, sys; print(sorted(os.listxattr(sys.argv[1], follow_symlinks=False)))",
        ])
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// What a checkout leaves, then its index and its stamp (which waits for a tick after the
/// index, so every file the checkout wrote is before it).
fn checked_out(root: &Path) -> std::path::PathBuf {
    let dir = root.join("wt");
    write(&dir, "kept.txt", "kept\n");
    write(&dir, "chmodded.txt", "mode\n");
    write(&dir, "rewritten.txt", "original\n");
    write(&dir, "d/inside.txt", "inside\n");
    write(&dir, "d/e/deeper.txt", "deeper\n");
    write(&dir, "locked/x.txt", "x\n");
    write(&dir, "attrs/.gitattributes", "*.txt text\n");
    write(&dir, ".gitattributes", "* -text\n");
    write(&dir, ".git/HEAD", "ref: refs/heads/main\n");
    let index = root.join("wt.checkout-index");
    std::fs::write(&index, "index").unwrap();
    write_stamp(&dir, &index).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(30));
    dir
}

#[test]
fn the_stamp_reads_back_what_it_recorded_and_refuses_anything_else() {
    let c = Creator {
        umask: 0o027,
        uid: 1000,
        gid: 100,
    };
    assert_eq!(Creator::parse(&c.render()), Some(c));
    assert_eq!(Creator::parse(""), None);
    assert_eq!(
        Creator::parse("anvil checkout stamp 2\numask 0022\nuid 0\ngid 0\n"),
        None
    );
    assert_eq!(
        Creator::parse("anvil checkout stamp 1\numask 0022\nuid x\ngid 0\n"),
        None
    );
    assert!(
        Creator::current().is_some(),
        "this is Linux: /proc/self/status has the umask"
    );
}

#[test]
fn only_what_the_checkout_wrote_is_left() {
    let root = tempfile::tempdir().unwrap();
    let dir = checked_out(root.path());
    let before_inside = ino(&dir.join("d/inside.txt"));
    let before_deeper = ino(&dir.join("d/e/deeper.txt"));
    let fresh_dir_mode = mode(&dir.join("d/e"));

    // A session: a chmod git does not track, a rewrite dated back, new files and
    // directories, a directory's mode, an unreadable directory, a link where a file was.
    std::fs::set_permissions(
        dir.join("chmodded.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let mtime = std::fs::metadata(dir.join("rewritten.txt"))
        .unwrap()
        .modified()
        .unwrap();
    std::fs::write(dir.join("rewritten.txt"), "ORIGINAL\n").unwrap();
    std::fs::File::options()
        .write(true)
        .open(dir.join("rewritten.txt"))
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    write(&dir, "new/sub/file.txt", "new\n");
    write(&dir, "d/added.txt", "added\n");
    std::fs::set_permissions(dir.join("d"), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(dir.join("locked"), std::fs::Permissions::from_mode(0o000)).unwrap();
    // As root a mode of 000 does not keep the scrub out: the directory is made anew, its
    // untouched file kept; as anyone else it cannot be walked and goes whole.
    let root_reads_locked = std::fs::read_dir(dir.join("locked")).is_ok();
    let xattr_dir = set_xattr(&dir.join("d/e"));
    std::fs::remove_file(dir.join("kept.txt")).ok();
    write(&dir, "kept.txt", "kept\n");

    let scrubbed = scrub(&dir, &root.path().join("spare"))
        .unwrap()
        .expect("reusable");

    let mut left = Vec::new();
    for entry in walk(&dir) {
        left.push(entry);
    }
    left.sort();
    let mut expected = vec![
        ".gitattributes",
        "attrs",
        "attrs/.gitattributes",
        "d",
        "d/e",
        "d/e/deeper.txt",
        "d/inside.txt",
    ];
    if root_reads_locked {
        expected.extend(["locked", "locked/x.txt"]);
        assert_eq!(mode(&dir.join("locked")), fresh_dir_mode);
    }
    assert_eq!(
        left, expected,
        "what the session touched is gone: the chmodded and rewritten files, the re-made \
         kept.txt, new files and directories, the unreadable directory, the own .git"
    );
    assert_eq!(
        ino(&dir.join("d/inside.txt")),
        before_inside,
        "untouched files stay"
    );
    assert_eq!(ino(&dir.join("d/e/deeper.txt")), before_deeper);
    assert_eq!(
        mode(&dir.join("d")),
        fresh_dir_mode,
        "the directory's mode is a checkout's"
    );
    if xattr_dir {
        assert_eq!(
            xattrs(&dir.join("d/e")),
            "[]",
            "the directory's xattr is gone"
        );
    } else {
        eprintln!("SKIPPED the xattr part: this filesystem takes no user xattrs");
    }
    assert!(!root.path().join("spare").exists());

    // The attributes left are those two, untouched.
    let both: [&[u8]; 2] = [b".gitattributes", b"attrs/.gitattributes"];
    assert!(scrubbed.keeps_attributes(&dir, both));
    assert!(
        !scrubbed.keeps_attributes(&dir, [b".gitattributes".as_slice()]),
        "one left that is not tracked"
    );
    let three: [&[u8]; 3] = [
        b".gitattributes",
        b"attrs/.gitattributes",
        b"d/.gitattributes",
    ];
    assert!(
        !scrubbed.keeps_attributes(&dir, three),
        "a tracked one that was not left"
    );
    std::fs::write(dir.join("attrs/.gitattributes"), "*.txt text\n").unwrap();
    assert!(!scrubbed.keeps_attributes(&dir, both), "one written since");
}

#[test]
fn a_changed_root_is_made_anew_with_what_stays_in_it() {
    let root = tempfile::tempdir().unwrap();
    let dir = checked_out(root.path());
    let fresh = mode(&dir);
    let inside = ino(&dir.join("d/inside.txt"));
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o750)).unwrap();
    let xattr = set_xattr(&dir);
    scrub(&dir, &root.path().join("spare"))
        .unwrap()
        .expect("reusable");
    assert_eq!(mode(&dir), fresh);
    if xattr {
        assert_eq!(xattrs(&dir), "[]");
    }
    assert_eq!(ino(&dir.join("d/inside.txt")), inside);
    assert!(dir.join("kept.txt").is_file());
}

#[test]
fn without_a_stamp_of_this_process_nothing_is_reused() {
    let root = tempfile::tempdir().unwrap();
    let dir = checked_out(root.path());
    let spare = root.path().join("spare");
    let stamp = stamp_beside(&dir);

    let mut other = Creator::current().unwrap();
    other.umask ^= 0o002;
    std::fs::write(&stamp, other.render()).unwrap();
    assert!(scrub(&dir, &spare).unwrap().is_none(), "another umask");

    std::fs::write(&stamp, Creator::current().unwrap().render()).unwrap();
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&stamp)
        .unwrap()
        .set_modified(later)
        .unwrap();
    assert!(
        scrub(&dir, &spare).unwrap().is_none(),
        "a stamp after now: the clock went back"
    );

    std::fs::remove_file(&stamp).unwrap();
    assert!(scrub(&dir, &spare).unwrap().is_none(), "no stamp");
    assert!(dir.join("kept.txt").is_file(), "and nothing was removed");
}

/// Every path under `dir`, relative.
fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            out.push(path.strip_prefix(dir).unwrap().display().to_string());
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            }
        }
    }
    out
}

/// `levels` nested directories `d/d/…` under `dir/deep`, a file at the bottom.
fn deep(dir: &Path, levels: usize) {
    let mut path = dir.join("deep");
    for _ in 0..levels {
        path.push("d");
    }
    std::fs::create_dir_all(&path).unwrap();
    std::fs::write(path.join("bottom.txt"), "bottom\n").unwrap();
}

/// A tree 1,500 levels deep — deeper than any recursive walk's stack would take — is no
/// crash: a session's is removed whole, one from before the stamp refuses the reuse.
#[test]
fn a_tree_of_any_depth_is_removed_or_refused_never_a_crash() {
    let root = tempfile::tempdir().unwrap();
    let dir = checked_out(root.path());
    deep(&dir, 1500);
    let scrubbed = std::thread::Builder::new()
        .stack_size(1024 * 1024)
        .spawn({
            let dir = dir.clone();
            let spare = root.path().join("spare");
            move || scrub(&dir, &spare).unwrap().is_some()
        })
        .unwrap()
        .join()
        .expect("no stack overflow on a small stack");
    assert!(scrubbed);
    assert!(
        !dir.join("deep").exists(),
        "the session's deep tree is gone"
    );

    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("wt");
    deep(&dir, 1500);
    let index = root.path().join("wt.checkout-index");
    std::fs::write(&index, "index").unwrap();
    write_stamp(&dir, &index).unwrap();
    assert!(
        scrub(&dir, &root.path().join("spare")).unwrap().is_none(),
        "a checkout that deep is not walked: checked out afresh"
    );
    remove_all(&dir).unwrap();
    assert!(!dir.exists(), "and removed whole");
}
