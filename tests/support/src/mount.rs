//! A small tmpfs of the test's own: a disk that can be filled, or made
//! read-only, without touching the machine's.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs mounted on a fresh temporary directory; unmounted when dropped.
/// Needs the right to mount (root, as in CI); without it the test fails
/// saying so.
pub struct Tmpfs {
    dir: tempfile::TempDir,
    size_kib: u64,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size_kib` KiB.
    pub fn mount(size_kib: u64) -> Tmpfs {
        let dir = tempfile::Builder::new()
            .prefix("petstore-tmpfs-")
            .tempdir()
            .expect("a temporary directory");
        run(Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_kib}k,mode=0755")])
            .arg("tmpfs")
            .arg(dir.path()));
        Tmpfs { dir, size_kib }
    }

    /// Its size, in bytes.
    pub fn size(&self) -> u64 {
        self.size_kib * 1024
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `name` inside it.
    pub fn join(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Makes it read-only (for everyone, root included).
    pub fn make_read_only(&self) {
        run(Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(self.dir.path()));
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy, so that a process still holding a file cannot keep it.
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

fn run(command: &mut Command) {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed (these tests need the right to mount a tmpfs, as root has): {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
