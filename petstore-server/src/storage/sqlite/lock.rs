//! One server per SQLite file, enforced with a lock file beside it.
//!
//! The in-memory catalogue is right only while this process is the file's
//! only writer, so `serve` and `migrate` take an exclusive `flock(2)` on
//! `FILE.lock` before they open the database, and hold it until the storage
//! is closed. A second process finds the lock taken and refuses to start,
//! naming the holder, without having opened — let alone changed — the
//! database.
//!
//! Why a lock file and not the database file itself: SQLite's locks are
//! POSIX record locks, which a process loses on *every* descriptor of the
//! file as soon as it closes *any* descriptor of it, so a descriptor of our
//! own on the database would silently drop SQLite's locks. `flock` on a
//! separate file is independent of them. And why not SQLite's exclusive
//! locking mode: it would also shut out every reader, including the
//! `sqlite3` shell an operator uses for a live backup.
//!
//! The kernel releases a `flock` when its process dies, however it dies, so
//! a server killed with SIGKILL leaves a stale file but never a stale lock.
//!
//! Dropping the lock unlocks it explicitly rather than only closing the
//! file: a `flock` belongs to the open file description, and a child that
//! another thread is starting (`fork` then `exec`) holds a copy of every
//! descriptor until its `exec`, so closing ours alone may leave the lock
//! held for a moment, and a storage reopened at once would find it taken.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use crate::storage::OpenError;

/// The held lock; released when dropped (or when the process exits).
#[derive(Debug)]
pub struct DatabaseLock {
    file: File,
}

impl Drop for DatabaseLock {
    fn drop(&mut self) {
        // Unlocking cannot fail on a descriptor we locked; if it somehow
        // did, closing the file still releases the lock once no copy is left.
        let _ = self.file.unlock();
    }
}

impl DatabaseLock {
    /// Takes the lock for the database at `database`, or says who holds it.
    pub fn acquire(database: &Path) -> Result<DatabaseLock, OpenError> {
        let path = lock_path(database);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| cannot_write(database, &path, e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                return Err(OpenError::InUse {
                    path: database.to_owned(),
                    holder: if holder.is_empty() {
                        format!("lock file {}", path.display())
                    } else {
                        format!("{holder}; lock file {}", path.display())
                    },
                });
            }
            Err(TryLockError::Error(e)) => return Err(cannot_write(database, &path, e)),
        }
        // Who holds it, for the message a second process prints.
        let holder = format!(
            "pid {}, {}",
            std::process::id(),
            std::env::args().collect::<Vec<_>>().join(" ")
        );
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(holder.as_bytes()))
            .map_err(|e| cannot_write(database, &path, e))?;
        Ok(DatabaseLock { file })
    }
}

/// `FILE.lock` beside `FILE`.
pub fn lock_path(database: &Path) -> PathBuf {
    let mut name = database.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

fn cannot_write(database: &Path, lock: &Path, error: std::io::Error) -> OpenError {
    match error.kind() {
        std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem => {
            OpenError::ReadOnly {
                path: database.to_owned(),
                reason: format!("cannot write the lock file {}: {error}", lock.display()),
            }
        }
        _ => OpenError::Io {
            doing: format!("opening the lock file {}", lock.display()),
            source: error,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_file_is_refused_naming_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let database = dir.path().join("pets.db");
        let held = DatabaseLock::acquire(&database).unwrap();
        let error = DatabaseLock::acquire(&database).unwrap_err();
        let message = error.to_string();
        assert!(matches!(error, OpenError::InUse { .. }), "{message}");
        assert!(
            message.contains(&database.display().to_string()),
            "{message}"
        );
        assert!(
            message.contains(&format!("pid {}", std::process::id())),
            "{message}"
        );
        assert!(!database.exists(), "the database itself was not touched");
        drop(held);
        DatabaseLock::acquire(&database).expect("free again once released");
    }

    /// What a child being started by another thread holds between its
    /// `fork` and its `exec`: a copy of the lock's descriptor.
    #[test]
    fn a_dropped_lock_is_free_even_while_a_copy_of_its_descriptor_is_open() {
        let dir = tempfile::tempdir().unwrap();
        let database = dir.path().join("pets.db");
        let held = DatabaseLock::acquire(&database).unwrap();
        let copy = held.file.try_clone().unwrap();
        drop(held);
        DatabaseLock::acquire(&database).expect("free once dropped, copy or not");
        drop(copy);
    }
}
