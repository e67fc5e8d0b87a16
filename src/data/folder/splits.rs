//! A folder of pictures split into folders of its own (`train/` + `val/`), told apart from a
//! folder of class folders: which is which, and the folders that would be taken for classes.

use std::path::{Path, PathBuf};

/// What a folder of pictures' validation folder beside `train/` may be called.
const VAL_FOLDERS: [&str; 3] = ["val", "valid", "validation"];

/// What a folder of pictures' held-out folder (not taken as validation) may be called.
const TEST_FOLDERS: [&str; 2] = ["test", "testing"];

/// What a folder of pictures' training folder may be called.
const TRAIN_FOLDERS: [&str; 2] = ["train", "training"];

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
fn split_folders_as_classes(dir: &Path) -> Result<(), String> {
    let names = folders(dir);
    let split = |these: &[&str]| named(&names, these).filter(|n| holds_classes(&dir.join(n)));
    let d = dir.display();
    let held = [&VAL_FOLDERS[..], &TEST_FOLDERS[..]].concat();
    let Some(train) = split(&TRAIN_FOLDERS) else {
        return match split(&held) {
            Some(v) => Err(format!(
                "{d}/{v} holds class folders of its own, so it would be learnt as a class named {v} beside the others ({}): move the training class folders into {d}/train, beside {d}/{v}{}",
                names.join(", "),
                match named(&names, &TEST_FOLDERS) == Some(v) {
                    true => format!(", and give images:{d}/train --val-data images:{d}/{v}"),
                    false => String::new(),
                }
            )),
            None => Ok(()),
        };
    };
    // (a val that is no folder: said as such, not as missing)
    let not_folder = (VAL_FOLDERS.iter()).find(|v| dir.join(v).exists() && !dir.join(v).is_dir());
    if let Some(v) = not_folder {
        return Err(format!(
            "{d}/{v} is not a folder: the validation pictures beside {d}/{train} go in a folder {d}/{v} of class folders"
        ));
    }
    let held_out = named(&names, &TEST_FOLDERS);
    let fix = match held_out {
        Some(t) => format!("give images:{d}/{train} --val-data images:{d}/{t}"),
        None => format!("give images:{d}/{train} (validation cut from it by --val-split), or put the validation pictures in {d}/val"),
    };
    Err(format!(
        "{d} holds a {train}/ folder of class folders but no val/ (nor valid/, validation/) beside a train/, so its folders would be taken as the classes ({}): {fix}",
        names.join(", ")
    ))
}

/// The folder of training pictures of `dir`, and its validation folder: its `train/` and
/// `val/` (or `valid/`, `validation/`, in any case) where it has both, else itself alone (a
/// split's folders taken for classes refused).
pub(in crate::data) fn halves(dir: &Path) -> Result<(PathBuf, Option<PathBuf>), String> {
    let names = folders(dir);
    match (named(&names, &TRAIN_FOLDERS), named(&names, &VAL_FOLDERS)) {
        (Some(t), Some(v)) => Ok((dir.join(t), Some(dir.join(v)))),
        _ => {
            split_folders_as_classes(dir)?;
            Ok((dir.to_path_buf(), None))
        }
    }
}
