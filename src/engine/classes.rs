//! What a model's outputs mean: the class names a checkpoint or a weights file records, output
//! by output, against the data's. A class the data puts at another output than the one the
//! weights were trained to give it would have the model answer with other classes' outputs:
//! `--resume` refuses it, `--init` says it (training relearns the head).

use std::path::Path;

use super::checkpoint::{CheckpointMeta, WEIGHTS};
use super::EngineError;

/// The first class both lists name at other outputs: its name, its output in `theirs` (the
/// weights') and in `ours` (the data's). Lists that name nothing (a table's class numbers) or
/// classes renamed in place move nothing.
pub fn moved(theirs: &[String], ours: &[String]) -> Option<(String, usize, usize)> {
    ours.iter().enumerate().find_map(|(i, name)| {
        let j = theirs.iter().position(|t| t == name)?;
        (j != i).then(|| (name.clone(), j, i))
    })
}

/// A resume of the checkpoint `meta` (in `dir`) on data whose classes are `ours`: refused where
/// a class moved to another output (a class renamed, added or removed since), and where the
/// checkpoint's classes were named and the data's are numbers (which cannot be matched). Where
/// every class has another name now (other data?), a note saying so: its outputs go on
/// answering by place.
pub fn resumable(
    meta: &CheckpointMeta,
    ours: &[String],
    dir: &Path,
) -> Result<Option<String>, EngineError> {
    if ours.is_empty() && !meta.classes.is_empty() {
        return Err(EngineError::Config(format!(
            "--resume {}: the checkpoint's run trained on named classes ({}) and this data's labels are class numbers, which cannot be matched to them: give the data it trained on, labelled by name, or start a new run from its weights with --init {}",
            dir.display(),
            crate::text::first_of(&meta.classes, 8),
            dir.join(WEIGHTS).display()
        )));
    }
    let theirs = &meta.classes;
    let Some((name, was, is)) = moved(theirs, ours) else {
        let all_renamed = !theirs.is_empty() && !ours.iter().any(|n| theirs.contains(n));
        return Ok(all_renamed.then(|| {
            format!(
                "--resume: none of the checkpoint's classes ({}) is this data's ({}): its outputs go on answering by place (output 0 was `{}`, is `{}` now); where that was not meant, give the data it trained on",
                crate::text::first_of(theirs, 4),
                crate::text::first_of(ours, 4),
                crate::text::excerpt(&theirs[0]),
                crate::text::excerpt(ours.first().map_or("", |s| s.as_str()))
            )
        }));
    };
    Err(EngineError::Config(format!(
        "--resume {}: the data's classes are not where the checkpoint's run trained them: `{}` was its output {was} and is this data's {is} (a class renamed, added or removed since?), so its outputs would answer for other classes; give the classes it trained on ({}), or start a new run from its weights with --init {} (its head learns the new places)",
        dir.display(),
        crate::text::excerpt(&name),
        crate::text::first_of(&meta.classes, 8),
        dir.join(WEIGHTS).display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(s: &str) -> Vec<String> {
        s.split(',').map(String::from).collect()
    }

    #[test]
    fn a_class_at_another_output_is_found_and_a_rename_in_place_is_not() {
        let trained = names("10,2,cat,dog");
        assert_eq!(moved(&trained, &trained), None);
        // `cat` renamed in place: the outputs still mean what they did
        assert_eq!(moved(&trained, &names("10,2,kitty,dog")), None);
        // a folder renamed so that it sorts elsewhere: `dog` moved from 3 to 2
        let after = names("10,2,dog,zz");
        assert_eq!(moved(&trained, &after), Some(("dog".into(), 3, 2)));
        // (nothing named on a side: nothing to compare)
        assert_eq!(moved(&[], &after), None);
        assert_eq!(moved(&trained, &[]), None);
    }

    #[test]
    fn a_resume_whose_classes_moved_is_refused_with_what_it_trained_on() {
        let meta = CheckpointMeta {
            classes: names("10,2,cat,dog"),
            ..CheckpointMeta::example()
        };
        let dir = Path::new("runs/pets/step-00000010");
        assert_eq!(resumable(&meta, &names("10,2,cat,dog"), dir).unwrap(), None);
        assert_eq!(
            resumable(&meta, &names("10,2,kitty,dog"), dir).unwrap(),
            None
        );
        // every class another name: said (other data?), not refused
        let note = resumable(&meta, &names("a,b,c,d"), dir).unwrap().unwrap();
        assert!(
            note.contains("none of the checkpoint's classes (10, 2, cat, dog) is this data's")
                && note.contains("output 0 was `10`, is `a` now"),
            "{note}"
        );
        let e = resumable(&meta, &names("10,2,dog,zz"), dir)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`dog` was its output 3 and is this data's 2")
                && e.contains("give the classes it trained on (10, 2, cat, dog)")
                && e.contains("--init runs/pets/step-00000010/model.safetensors"),
            "{e}"
        );
        // named classes resumed on class numbers: nothing to match them by
        let e = resumable(&meta, &[], dir).unwrap_err().to_string();
        assert!(e.contains("trained on named classes (10, 2, cat, dog) and this data's labels are class numbers"), "{e}");
        // a checkpoint that named none (class numbers, or from before it recorded them)
        let numbered = CheckpointMeta::example();
        assert!(resumable(&numbered, &names("cat,dog"), dir).is_ok());
    }
}
