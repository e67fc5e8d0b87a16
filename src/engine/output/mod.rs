//! Where a command may write the file it is asked for (`export`'s weights, `eval --json`,
//! `scale --out`): a new file, or a regular file of the same kind that it replaces (through a
//! link, the file linked to); never a directory, a device or FIFO, a file of a checkpoint (what
//! `--resume` reads) or a run directory's own files (what `view`, `runs` and `attach` read), nor a
//! file that holds something else. Checked before any work, writing nothing.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::engine::{checkpoint, rundir};
use crate::files::read;
use crate::files::write::{can_write_in, file_in_the_way};

/// The first `n` bytes of the file at `p` (fewer where it is shorter; none where it cannot be
/// read): for `Output::ours`.
pub fn head(p: &Path, n: u64) -> Vec<u8> {
    let mut head = Vec::new();
    let _ = std::fs::File::open(p).and_then(|f| f.take(n).read_to_end(&mut head));
    head
}

/// The file a command writes, as its errors name it.
pub struct Output<'a> {
    /// The flag that names it (`--json`), or "" for a command's own argument.
    pub flag: &'a str,
    /// What it holds, as "is not ..." says it: "a safetensors file".
    pub kind: &'a str,
    /// A file name to give as an example: "model.safetensors".
    pub example: &'a str,
    /// Whether an existing file is one of this kind (it may be replaced).
    pub ours: fn(&Path) -> bool,
}

impl Output<'_> {
    /// The target `out` to write, or why not.
    pub fn target(&self, out: &Path) -> Result<PathBuf, String> {
        let shown = match self.flag {
            "" => out.display().to_string(),
            f => format!("{f} {}", out.display()),
        };
        let example = self.example;
        if out.as_os_str().is_empty() {
            return Err(format!(
                "{shown}: an empty path: give the file to write, such as {example}"
            ));
        }
        let meta = std::fs::metadata(out);
        let target = match &meta {
            Ok(m) if m.is_dir() => {
                let s = out.display();
                return Err(format!(
                    "{shown} is a directory; give the file to write, e.g. {}/{example}",
                    s.to_string().trim_end_matches('/')
                ));
            }
            Ok(m) if !m.is_file() => {
                return Err(format!(
                    "{shown} is {}, not a regular file; give the path of a file to write",
                    read::kind_of(m.file_type())
                ))
            }
            // a link to a file: that file is replaced, the link kept
            Ok(_) => out.canonicalize().unwrap_or_else(|_| out.to_path_buf()),
            // (`new/` names a folder, the file to write in it left out; its parent is `.`)
            Err(_) if out.as_os_str().as_encoded_bytes().ends_with(b"/") => {
                let named = Path::new(out.to_str().map_or("", |s| s.trim_end_matches('/')));
                return Err(match named.is_file() {
                    true => format!(
                        "{shown}: {} is a file, not a folder; give the file's path without the /",
                        named.display()
                    ),
                    false => format!(
                        "{shown} ends in /, naming a folder, and none is there; give the file to write, such as {}{example} (in a folder that exists)",
                        out.display()
                    ),
                });
            }
            Err(_) => out.to_path_buf(),
        };
        let folder = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !folder.is_dir() {
            let f = folder.display();
            return Err(match file_in_the_way(&target) {
                Some(file) => format!(
                    "{shown}: {} is a file, not a folder; give a path in a folder",
                    file.display()
                ),
                None => format!(
                    "{shown}: the folder {f} does not exist; create it first (mkdir -p {f})"
                ),
            });
        }
        // a run's own files, whatever they hold
        if checkpoint::is_checkpoint(&folder) {
            return Err(format!(
                "{shown} is in the checkpoint {}: its files are what --resume reads; write elsewhere",
                folder.display()
            ));
        }
        let name = target.file_name().unwrap_or_default();
        if rundir::own_name(name) && rundir::is_run_dir(&folder) {
            return Err(format!(
                "{shown} is a file of the run directory {} (what view, runs and attach read); write elsewhere",
                folder.display()
            ));
        }
        // a file that holds something else is not replaced
        if meta.is_ok_and(|m| m.len() > 0) && !(self.ours)(out) {
            return Err(format!(
                "{shown} exists and is not {}: remove it or give another name",
                self.kind
            ));
        }
        // written beside the target, then renamed over it: the folder must take a new file
        can_write_in(&folder).map_err(|e| {
            format!(
                "{shown}: cannot make a file in {} ({e}); give a path in a folder you can write",
                folder.display()
            )
        })?;
        Ok(target)
    }
}

#[cfg(test)]
mod tests;
