//! Names in a weights file against a model's: lists of them as a report says them, and the
//! hint where a layer list numbers its layers otherwise than the file's run did (said only of
//! a layer list: a named network's names are torchvision's, whatever their numbers).

/// The most names listed in a report line.
const LISTED: usize = 6;

pub(super) fn listed(names: &[String]) -> String {
    crate::text::first_of(names, LISTED)
}

/// A name with each run of digits masked (`dense.#.weight`): layer lists number every layer,
/// so a list with an activation or dropout more before a layer names it with another index
/// (and a list of dense layers alone is named as an MLP, `mlp.#`).
pub(super) fn masked(name: &str) -> String {
    let name = match name.strip_prefix("mlp.") {
        Some(rest) => format!("dense.{rest}"),
        None => name.to_string(),
    };
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c.is_ascii_digit() {
            true if out.ends_with('#') => {}
            true => out.push('#'),
            false => out.push(c),
        }
    }
    out
}

/// The numbers in a name, in order (`layer1.0.conv2.weight`: 1, 0, 2).
fn indices(name: &str) -> Vec<u64> {
    (name.split(|c: char| !c.is_ascii_digit()))
        .filter_map(|d| d.parse().ok())
        .collect()
}

/// Whether `name` is the last of its kind among `names` (no name masked alike has higher
/// numbers): a layer list's classifier head, where `name` is its last dense layer's.
pub(super) fn last_of_kind(name: &str, names: &[impl AsRef<str>]) -> bool {
    let (kind, at) = (masked(name), indices(name));
    !(names.iter().map(AsRef::as_ref)).any(|n| masked(n) == kind && indices(n) > at)
}

/// Where one of this model's names (`ours`) and one of the file's (`theirs`) differ only in
/// their indices, and `fits(ours, theirs)` (their shapes agree): the words saying so (a layer
/// list written with other layers before it).
pub(super) fn renumbered<'a>(
    ours: impl IntoIterator<Item = &'a str>,
    theirs: &[impl AsRef<str>],
    fits: impl Fn(&str, &str) -> bool,
) -> Option<String> {
    let theirs: Vec<(&str, String)> = (theirs.iter())
        .map(|t| (t.as_ref(), masked(t.as_ref())))
        .collect();
    ours.into_iter().find_map(|o| {
        let m = masked(o);
        let (t, _) = (theirs.iter()).find(|(t, tm)| *tm == m && *t != o && fits(o, t))?;
        Some(format!(
            " (the file's `{}` may be this model's `{o}`: a layer list names each layer by its place in the list, counting activations and dropout, and a list of dense layers alone as mlp; give --model the layer list the file was trained with)",
            crate::text::excerpt(t)
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_apart_only_in_their_indices_are_said() {
        assert_eq!(masked("layer1.0.conv12.weight"), "layer#.#.conv#.weight");
        let any = |_: &str, _: &str| true;
        let said = renumbered(["dense.4.weight", "dense.4.bias"], &["dense.3.bias"], any).unwrap();
        assert!(
            said.contains("the file's `dense.3.bias` may be this model's `dense.4.bias`"),
            "{said}"
        );
        assert_eq!(
            renumbered(["dense.4.weight"], &["conv.3.weight"], any),
            None
        );
        assert_eq!(
            renumbered(["dense.4.weight"], &["dense.4.weight"], any),
            None
        );
        assert!(renumbered(["dense.0.weight"], &["mlp.0.weight"], any).is_some());
        // the last dense layer of a list is its head; an earlier one is not
        let file = ["dense.2.weight", "dense.6.weight", "conv.0.weight"];
        assert!(last_of_kind("dense.6.weight", &file));
        assert!(!last_of_kind("dense.2.weight", &file));
        assert!(last_of_kind("conv.0.weight", &file));
        // (a tensor of another shape is no layer renumbered: not said)
        let none = |_: &str, _: &str| false;
        assert_eq!(
            renumbered(["dense.1.weight"], &["mlp.0.weight"], none),
            None
        );
    }
}
