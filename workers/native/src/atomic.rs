//! Files made durable under their final names, the one way every writer here does it: the
//! file is written under a temporary name beside its final one, fsynced, renamed into
//! place, and then the folder is fsynced, so a reader sees either no file or the whole one.
//!
//! One file at a time: [`create`], write, [`sync`], [`rename`], [`sync_dir`] (a writer that
//! lands several files one after the other may sync the folder once, after the last).
//! Several files that land together: a [`Landing`], which syncs them all, renames them in
//! the order they were staged, syncs the folder, and removes them again if it is dropped
//! before [`Landing::land`] succeeded. The caller names the temporary files.

use std::fmt;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// The step that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Create,
    Sync,
    Rename,
}

/// A step of landing a file failed: on `path` (the temporary file for [`Op::Create`] and
/// [`Op::Sync`], the final name for [`Op::Rename`]).
#[derive(Debug)]
pub struct AtomicError {
    pub op: Op,
    pub path: PathBuf,
    pub source: io::Error,
}

impl fmt::Display for AtomicError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.op {
            Op::Create => "create",
            Op::Sync => "sync",
            Op::Rename => "rename to",
        };
        write!(f, "{op} {}: {}", self.path.display(), self.source)
    }
}

impl std::error::Error for AtomicError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

pub type Result<T> = std::result::Result<T, AtomicError>;

fn err(op: Op, path: &Path) -> impl FnOnce(io::Error) -> AtomicError + '_ {
    move |source| AtomicError {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Creates (or truncates) the temporary file `temp`.
pub fn create(temp: &Path) -> Result<File> {
    File::create(temp).map_err(err(Op::Create, temp))
}

/// Fsyncs `file`, open on the temporary file `temp`.
pub fn sync(file: &File, temp: &Path) -> Result<()> {
    file.sync_all().map_err(err(Op::Sync, temp))
}

/// Fsyncs the temporary file `temp`, opening it again (its writer has closed it).
pub fn sync_path(temp: &Path) -> Result<()> {
    File::open(temp)
        .and_then(|f| f.sync_all())
        .map_err(err(Op::Sync, temp))
}

/// Renames the synced temporary file `temp` to its final name `target`.
pub fn rename(temp: &Path, target: &Path) -> Result<()> {
    std::fs::rename(temp, target).map_err(err(Op::Rename, target))
}

/// Fsyncs the folder `dir` so the renames in it last; best effort (not every file system
/// lets a folder be opened and synced).
pub fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Files in one folder written under temporary names that land together.
pub struct Landing {
    dir: PathBuf,
    files: Vec<(PathBuf, PathBuf)>,
    landed: bool,
}

impl Landing {
    pub fn new(dir: &Path) -> Landing {
        Landing {
            dir: dir.to_path_buf(),
            files: Vec::new(),
            landed: false,
        }
    }

    /// Adds a file written as `temp_name` that lands as `target_name` (both in the folder),
    /// after the files added before it; returns the temporary file's path.
    pub fn stage(&mut self, temp_name: impl AsRef<Path>, target_name: impl AsRef<Path>) -> PathBuf {
        let temp = self.dir.join(temp_name);
        self.files.push((temp.clone(), self.dir.join(target_name)));
        temp
    }

    /// Every staged file: (temporary path, final path), in landing order.
    pub fn files(&self) -> &[(PathBuf, PathBuf)] {
        &self.files
    }

    /// Syncs every file, renames them in the order staged and syncs the folder. If a rename
    /// fails, the files already renamed are removed again.
    pub fn land(mut self) -> Result<()> {
        for (temp, _) in &self.files {
            sync_path(temp)?;
        }
        for (k, (temp, target)) in self.files.iter().enumerate() {
            if let Err(e) = rename(temp, target) {
                for (_, done) in &self.files[..k] {
                    let _ = std::fs::remove_file(done);
                }
                return Err(e);
            }
        }
        sync_dir(&self.dir);
        self.landed = true;
        Ok(())
    }
}

impl Drop for Landing {
    fn drop(&mut self) {
        if !self.landed {
            for (temp, _) in &self.files {
                let _ = std::fs::remove_file(temp);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("atomic-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn landing_renames_in_order_and_cleans_up_when_dropped() {
        let d = scratch("landing");
        let mut l = Landing::new(&d);
        for n in ["a", "b"] {
            let t = l.stage(format!("writing-{n}"), n);
            create(&t).unwrap().write_all(n.as_bytes()).unwrap();
        }
        assert_eq!(l.files()[1].1, d.join("b"));
        l.land().unwrap();
        assert_eq!(std::fs::read(d.join("a")).unwrap(), b"a");
        assert!(!d.join("writing-b").exists());

        let mut l = Landing::new(&d);
        let t = l.stage("writing-c", "c");
        create(&t).unwrap();
        drop(l);
        assert!(!t.exists() && !d.join("c").exists());

        let mut l = Landing::new(&d);
        l.stage("missing", "m");
        let e = l.land().unwrap_err();
        assert_eq!((e.op, e.path), (Op::Sync, d.join("missing")));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
