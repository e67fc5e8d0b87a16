//! What an `--init` file says its weights were trained for (an export's `mgtop.*` metadata, a
//! checkpoint's `state.json` beside its weights), against this run: a class the data puts at
//! another output (class folders renamed, added or removed), inputs prepared otherwise (another
//! scaling, picture size or normalisation). Each is said: the weights start out answering by
//! what they learned, and training relearns what it must.

use std::path::Path;

use super::super::classes;
use crate::engine::checkpoint::{self, tensor_file};
use crate::nn::model::Model;

/// What a weights file records of the run that trained them (empty where it says nothing: a
/// file PyTorch wrote).
#[derive(Default)]
struct Recorded {
    /// Each output's class.
    classes: Vec<String>,
    /// How its inputs were prepared, in words.
    inputs: Option<String>,
    /// Its `--data`.
    data: Option<String>,
    /// Its `--model`, and the input it was built for (`3x32x32`).
    model: Option<(String, Option<String>)>,
}

fn recorded(path: &Path) -> Recorded {
    if let Some(dir) = checkpoint::of_weights(path) {
        return checkpoint::read_meta(dir).map_or(Recorded::default(), |m| Recorded {
            model: (m.config.get("model").and_then(|v| v.as_str()))
                .map(|s| (s.to_string(), m.input.clone())),
            classes: m.classes,
            inputs: m.inputs,
            data: Some(m.data),
        });
    }
    let expect = crate::files::read::Expect {
        what: "a safetensors weights file",
        flag: "--init",
        max: u64::MAX,
        fix: "",
    };
    let Ok((mut file, len)) = crate::files::read::open(path, &expect) else {
        return Recorded::default();
    };
    let header = tensor_file::read_header(&mut file, len).map(|(_, h)| h);
    let info = |key: &str| {
        let h = header.as_ref()?;
        Some(h.get("__metadata__")?.get(key)?.as_str()?.to_string())
    };
    Recorded {
        classes: (info("mgtop.classes").and_then(|s| serde_json::from_str(&s).ok()))
            .unwrap_or_default(),
        inputs: info("mgtop.inputs"),
        data: info("mgtop.data"),
        model: info("mgtop.model").map(|m| (m, info("mgtop.input"))),
    }
}

/// Why a file none of whose tensors `model` names would not be its weights: the model the file
/// says it holds (an export's metadata, a checkpoint's record), where that is another, else the
/// question.
pub fn not_this_model(path: &Path, model: &Model) -> String {
    let theirs = recorded(path).model.filter(|(m, _)| *m != model.spec);
    match theirs {
        Some((m, input)) => {
            let on = input.map_or(String::new(), |i| {
                format!(" on {} inputs", crate::text::excerpt(&i))
            });
            format!(
                ": its weights are of --model {}{on}, not this run's",
                crate::text::excerpt(&m)
            )
        }
        None => "; is it a checkpoint of this --model?".into(),
    }
}

/// Inputs prepared as `theirs` and as `ours` say (each as `InputRecipe` words them), each as
/// an excerpt of the parts where they differ: the parts both begin or end with left out as `…`
/// (a long recipe's difference, the picture's size, was cut off past the excerpt's length).
pub fn inputs_apart(theirs: &str, ours: &str) -> (String, String) {
    // (parts are split at the commas outside brackets: a normalisation's lists stay whole)
    let parts = |s: &str| -> Vec<String> {
        let (mut out, mut part, mut depth) = (Vec::new(), String::new(), 0i32);
        for c in s.chars() {
            match c {
                '[' | '(' => depth += 1,
                ']' | ')' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(std::mem::take(&mut part).trim().to_string());
                    continue;
                }
                _ => {}
            }
            part.push(c);
        }
        out.push(part.trim().to_string());
        out
    };
    let (a, b) = (parts(theirs), parts(ours));
    let first = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let room = a.len().min(b.len()) - first;
    let last = (a.iter().rev().zip(b.iter().rev()))
        .take(room)
        .take_while(|(x, y)| x == y)
        .count();
    // (a part one has more: said after the part before it, where the other would have it, or
    // before the part after it where it leads)
    let (first, last) = match a.len().min(b.len()) == first + last {
        true if first > 0 => (first - 1, last),
        true => (first, last.saturating_sub(1)),
        false => (first, last),
    };
    let said = |p: &[String]| {
        let mut middle: Vec<&str> = p[first..p.len() - last]
            .iter()
            .map(String::as_str)
            .collect();
        if first > 0 {
            middle.insert(0, "…");
        }
        if last > 0 {
            middle.push("…");
        }
        // (a normalisation's words are over 100 characters: the difference may be in them)
        crate::text::excerpt_of(&middle.join(", "), 240)
    };
    (said(&a), said(&b))
}

/// How inputs prepared as `theirs` says differ from `ours` (each as `InputRecipe` words them):
/// pictures normalised alike, only sized or cropped otherwise, hold the same values.
pub fn how_apart(theirs: &str, ours: &str) -> &'static str {
    use crate::data::InputRecipe;
    match InputRecipe::values_part(theirs) {
        Some(v) if InputRecipe::values_part(ours) == Some(v) => "its pictures were sized or cropped otherwise, their values normalised alike; where that was not meant, size them as its run did (--image-size)",
        _ => "its first layer starts on values prepared otherwise; where that was not meant, prepare them as its run did (--image-size, --normalize)",
    }
}

/// What the weights `model` loaded from the file `path` were trained for, where it is not what
/// this run gives them: data of the classes `ours`, inputs prepared as `inputs` says (empty:
/// not said). The notes saying so.
pub fn against_run(path: &Path, model: &Model, ours: &[String], inputs: &str) -> Vec<String> {
    let theirs = recorded(path);
    let mut notes = Vec::new();
    // (a head for another count was made anew: nothing of the file's to place)
    let same_count = theirs.classes.len() == model.classes();
    if let Some((name, was, is)) = (classes::moved(&theirs.classes, ours)).filter(|_| same_count) {
        notes.push(format!(
            "--init: the file's outputs were trained for classes at other places (`{}` was its output {was} and is this data's {is}): its head starts out answering by the file's places, and training relearns them",
            crate::text::excerpt(&name)
        ));
    } else if same_count && !ours.is_empty() && !theirs.classes.is_empty() && theirs.classes != ours
    {
        // (as many classes, but others: its outputs answer for the file's until relearned)
        notes.push(format!(
            "--init: the file's head was trained for other classes ({}) than this data's ({}): its outputs start out answering for the file's classes, and training relearns them",
            crate::text::first_of(&theirs.classes, 4),
            crate::text::first_of(ours, 4)
        ));
    }
    if let Some(t) = theirs.inputs.filter(|t| !inputs.is_empty() && t != inputs) {
        let data = (theirs.data.as_deref()).map_or(String::new(), |d| {
            format!(", from --data {}", crate::text::excerpt(d))
        });
        let (was, is) = inputs_apart(&t, inputs);
        notes.push(format!(
            "--init: the file's weights learned on inputs {was}{data}; this run's are {is}: {}",
            how_apart(&t, inputs)
        ));
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::{how_apart, inputs_apart};

    /// The parts two recipes differ in are said, not cut off past an excerpt's length.
    #[test]
    fn inputs_apart_says_the_parts_that_differ() {
        let norm = "normalised per channel (x/255-mean)/std with mean [0.485, 0.456, 0.406] std [0.229, 0.224, 0.225]";
        let a = format!("RGB pictures shorter side to 27, centre crop 24x24, {norm}");
        let b = format!("RGB pictures shorter side to 24, centre crop 24x24, {norm}");
        let (was, is) = inputs_apart(&a, &b);
        assert_eq!(was, "RGB pictures shorter side to 27, …");
        assert_eq!(is, "RGB pictures shorter side to 24, …");
        // a part one has more: after the part before it
        let c = format!("RGB pictures shorter side to 27, centre crop 24x24, flipped, {norm}");
        assert_eq!(inputs_apart(&a, &c).0, "…, centre crop 24x24, …");
        assert_eq!(inputs_apart(&a, &c).1, "…, centre crop 24x24, flipped, …");
        // a leading part more: before the part after it
        let (was, is) = inputs_apart(&format!("flipped, {norm}"), norm);
        assert!(was.starts_with("flipped, normalised per channel"), "{was}");
        assert!(is.starts_with("normalised per channel"), "{is}");
        // nothing alike: whole
        let t = "scaled x*1/16 to [0,1]";
        assert_eq!(inputs_apart(t, "used as given").0, t);
    }

    #[test]
    fn pictures_only_sized_otherwise_are_not_said_to_hold_other_values() {
        let norm = "normalised per channel (x/255-mean)/std with mean [0.485, 0.456, 0.406] std [0.229, 0.224, 0.225]";
        let a = format!("shorter side to 73, centre crop 64x64, {norm}");
        let b =
            format!("shorter side to 64, centre crop 64x64, augmented flip in training, {norm}");
        assert!(how_apart(&a, &b).contains("sized or cropped otherwise"));
        let unit = "shorter side to 64, centre crop 64x64, normalised per channel (x/255-mean)/std with mean [0.5, 0.5, 0.5] std [0.5, 0.5, 0.5]";
        assert!(how_apart(&a, unit).contains("values prepared otherwise"));
        assert!(how_apart("scaled x*1/16 to [0,1]", "used as given")
            .contains("values prepared otherwise"));
    }
}
