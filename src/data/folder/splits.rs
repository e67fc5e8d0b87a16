//! A folder of pictures split into folders of its own (`train/` + `val/`), told apart from a
//! folder of class folders: which is which, and the folders that would be taken for classes.

use std::path::{Path, PathBuf};

/// What a folder of pictures' validation folder beside `train/` may be called.
const VAL_FOLDERS: [&str; 3] = ["val", "valid", "validation"];

/// What a folder of pictures' held-out folder (not taken as validation) may be called.
const TEST_FOLDERS: [&str; 2] = ["test", "testing"];

/// What a folder of pictures' training folder may be called.
const TRAIN_FOLDERS: [&str; 2] = ["train", "training"];

/// What a folder of pictures is read for: a refusal's fix names the flag that reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Training's `--data` (its `val/` too).
    Training,
    /// Training's `--val-data`.
    Validation,
    /// `eval --data`.
    Evaluated,
}

impl Role {
    /// How to take `folder` as the set this role reads.
    fn take(self, folder: &str) -> String {
        match self {
            Role::Training => format!("give images:{folder}"),
            Role::Validation => format!("give --val-data images:{folder}"),
            Role::Evaluated => format!("give --data images:{folder}"),
        }
    }
}

/// The sub-folders of `dir`, sorted.
fn folders(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = (std::fs::read_dir(dir).into_iter().flatten().flatten())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The first of `names` that is one of `these` in any case ("Train").
fn named<'a>(names: &'a [String], these: &[&str]) -> Option<&'a String> {
    (names.iter()).find(|n| these.contains(&n.to_lowercase().as_str()))
}

/// Whether `dir` is a split's folder: class folders, and no pictures of its own.
fn holds_classes(dir: &Path) -> bool {
    let inside: Vec<PathBuf> = (std::fs::read_dir(dir).into_iter().flatten())
        .flatten()
        .map(|e| e.path())
        .collect();
    inside.iter().any(|p| p.is_dir()) && !inside.iter().any(|p| p.is_file() && super::is_image(p))
}

/// Refuses a folder whose would-be class folders are a split's (`train/`, `test/`, `val/`): its
/// pictures would be learnt as "train" against "test", their own classes one level down, or a
/// validation set as a class "val" beside the real ones. A `train` folder of pictures is a class
/// of that name (CIFAR-100 has one), not a split.
fn split_folders_as_classes(dir: &Path, role: Role) -> Result<(), String> {
    let names = folders(dir);
    let split = |these: &[&str]| named(&names, these).filter(|n| holds_classes(&dir.join(n)));
    let d = dir.display();
    let held = [&VAL_FOLDERS[..], &TEST_FOLDERS[..]].concat();
    let Some(train) = split(&TRAIN_FOLDERS) else {
        let Some(v) = split(&held) else {
            return Ok(());
        };
        let listed = names.join(", ");
        return Err(match role {
            Role::Training => format!(
                "{d}/{v} holds class folders of its own, so it would be learnt as a class named {v} beside the others ({listed}): move the training class folders into {d}/train, beside {d}/{v}{}",
                match named(&names, &TEST_FOLDERS) == Some(v) {
                    true => format!(", and give images:{d}/train --val-data images:{d}/{v}"),
                    false => String::new(),
                }
            ),
            _ => format!(
                "{d}/{v} holds class folders of its own, so it would be taken as a class named {v} beside the others ({listed}): {} to take its pictures, or move it out of {d}",
                role.take(&format!("{d}/{v}"))
            ),
        });
    };
    // (a val that is no folder: said as such, not as missing)
    let not_folder = (VAL_FOLDERS.iter()).find(|v| dir.join(v).exists() && !dir.join(v).is_dir());
    if let Some(v) = not_folder {
        return Err(format!(
            "{d}/{v} is not a folder: the validation pictures beside {d}/{train} go in a folder {d}/{v} of class folders"
        ));
    }
    let held_out = named(&names, &TEST_FOLDERS);
    let fix = match (held_out, role) {
        (Some(t), Role::Training) => format!("give images:{d}/{train} --val-data images:{d}/{t}"),
        (None, Role::Training) => format!("give images:{d}/{train} (validation cut from it by --val-split), or put the validation pictures in {d}/val"),
        (Some(t), _) => role.take(&format!("{d}/{t}")),
        (None, _) => format!("{} of class folders (not its {train}/)", role.take("FOLDER")),
    };
    Err(format!(
        "{d} holds a {train}/ folder of class folders but no val/ (nor valid/, validation/) beside a train/, so its folders would be taken as the classes ({}): {fix}",
        names.join(", ")
    ))
}

/// The folder of training pictures of `dir`, and its validation folder: its `train/` and
/// `val/` (or `valid/`, `validation/`, in any case) where it has both, else itself alone (a
/// split's folders taken for classes refused).
pub(in crate::data) fn halves(
    dir: &Path,
    role: Role,
) -> Result<(PathBuf, Option<PathBuf>), String> {
    let names = folders(dir);
    match (named(&names, &TRAIN_FOLDERS), named(&names, &VAL_FOLDERS)) {
        (Some(t), Some(v)) => Ok((dir.join(t), Some(dir.join(v)))),
        _ => {
            split_folders_as_classes(dir, role)?;
            Ok((dir.to_path_buf(), None))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refusal's fix names the flag that reads the folder: `eval`'s `--data`, training's
    /// `--val-data` (not training's `--data ... --val-data`).
    #[test]
    fn a_split_folder_refused_is_fixed_with_the_flag_that_reads_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        for f in ["train/ant", "test/ant"] {
            std::fs::create_dir_all(dir.join(f)).unwrap();
        }
        let d = dir.display();
        let said = |role| halves(dir, role).unwrap_err();
        let e = said(Role::Training);
        assert!(
            e.ends_with(&format!("give images:{d}/train --val-data images:{d}/test")),
            "{e}"
        );
        let e = said(Role::Validation);
        assert!(
            e.ends_with(&format!(": give --val-data images:{d}/test")),
            "{e}"
        );
        let e = said(Role::Evaluated);
        assert!(
            e.ends_with(&format!(": give --data images:{d}/test")),
            "{e}"
        );
        // class folders beside a test/ of class folders
        std::fs::rename(dir.join("train/ant"), dir.join("ant")).unwrap();
        std::fs::remove_dir(dir.join("train")).unwrap();
        let e = said(Role::Evaluated);
        assert!(
            e.contains("taken as a class named test beside the others (ant, test)")
                && e.contains(&format!("give --data images:{d}/test to take its pictures")),
            "{e}"
        );
        let e = said(Role::Training);
        assert!(
            e.contains(&format!("move the training class folders into {d}/train")),
            "{e}"
        );
    }
}
