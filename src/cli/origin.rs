//! Where a refused setting came from, when no flag gave it: the `--config` file (named with the
//! line that sets it, so the user mends the file, not a flag they never typed) or the resumed
//! checkpoint's record of its run. A refusal names its flags (`--lr 0 is invalid: ...`); those
//! are looked up here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::TrainArgs;

/// What a refusal of a setting no flag gave but a resumed checkpoint recorded ends with.
pub(super) const TAKEN_FIX: &str =
    " (recorded in the resumed checkpoint's state.json, not given here: give the flag to replace it)";

/// The settings of a run that no flag gave, by where they came from.
#[derive(Debug, Default)]
pub struct Origins {
    /// The config file, and the line of each key it set that no flag overrode.
    file: Option<(PathBuf, BTreeMap<String, usize>)>,
    /// The keys the config file set that flags overrode.
    overridden: Vec<String>,
    /// The `--flag value`s taken from a resumed checkpoint (as the start-up line says them).
    pub(super) taken: Option<String>,
}

impl Origins {
    /// Notes the config file at `path` (its `text`) read under the flags `flags`.
    pub(super) fn file(&mut self, path: &Path, text: &str, flags: &TrainArgs) {
        // (a file the flags cannot be told apart from is blamed for nothing)
        let Ok(given) = given(flags) else { return };
        // the budget is one setting, as is where the run starts: a flag for either of its keys
        // replaces the file's, and is named (as `resolve::merge` takes them)
        let (budget, start) = (["epochs", "steps"], ["init", "resume"]);
        let flag_of = |group: [&'static str; 2]| group.into_iter().find(|k| given(k));
        let (budget_flag, start_flag) = (flag_of(budget), flag_of(start));
        let replaced = |k: &str| match (budget_flag, start_flag) {
            (Some(flag), _) if budget.contains(&k) => Some(flag.to_string()),
            (_, Some(flag)) if start.contains(&k) => Some(flag.to_string()),
            // (the file's `init-partial` goes with its `init`)
            (_, Some("resume")) if k == "init-partial" => Some("resume".to_string()),
            _ => given(k).then(|| k.to_string()),
        };
        let (overridden, kept): (Vec<_>, Vec<_>) =
            toml::from_str::<BTreeMap<String, toml::Spanned<toml::Value>>>(text)
                .unwrap_or_default()
                .into_iter()
                .partition(|(k, _)| replaced(k).is_some());
        let keys = (kept.into_iter())
            .map(|(k, v)| (k, text[..v.span().start].matches('\n').count() + 1))
            .collect();
        self.overridden = Vec::new();
        for k in overridden.iter().filter_map(|(k, _)| replaced(k)) {
            if !self.overridden.contains(&k) {
                self.overridden.push(k);
            }
        }
        self.file = Some((path.to_path_buf(), keys));
    }

    /// The start-up line of a run given a config file: the settings it gave, and those flags
    /// gave over it.
    pub fn config_note(&self) -> Option<String> {
        let (path, keys) = self.file.as_ref()?;
        let list = |k: Vec<&str>| match k.is_empty() {
            true => "none".to_string(),
            false => k.join(", "),
        };
        let mut note = format!(
            "config file {}: {}",
            path.display(),
            list(keys.keys().map(String::as_str).collect())
        );
        if !self.overridden.is_empty() {
            let flags: Vec<String> = self.overridden.iter().map(|k| format!("--{k}")).collect();
            note += &format!(" (given over it: {})", flags.join(", "));
        }
        Some(note)
    }

    /// Where setting `flag` (given: by a flag or the config file) came from: `--flag`, or the
    /// config file's line.
    pub fn given(&self, flag: &str) -> String {
        match &self.file {
            Some((path, keys)) => match keys.get(flag) {
                Some(line) => format!("config file {} (line {line})", path.display()),
                None => format!("--{flag}"),
            },
            None => format!("--{flag}"),
        }
    }

    /// Which of `flags` (names without `--`) the config file set, with its lines, for a
    /// refusal that does not name them in its problem (a checkpoint that does not fit this
    /// run's model): `; this run's --model is set by config file run.toml (line 2)`.
    pub fn set_by_file(&self, flags: &[&str]) -> Option<String> {
        let (path, keys) = self.file.as_ref()?;
        let set: Vec<(&str, usize)> = (flags.iter())
            .filter_map(|f| keys.get(*f).map(|l| (*f, *l)))
            .collect();
        let (names, lines): (Vec<String>, Vec<String>) = (set.iter())
            .map(|(f, l)| (format!("--{f}"), l.to_string()))
            .unzip();
        let (verb, at) = match lines.split_last() {
            None => return None,
            Some((last, [])) => ("is", format!("line {last}")),
            Some((last, first)) => ("are", format!("lines {} and {last}", first.join(", "))),
        };
        Some(format!(
            "; this run's {} {verb} set by config file {} ({at})",
            names.join(" and "),
            path.display()
        ))
    }

    /// `refusal` said with where its settings came from where no flag gave them.
    pub fn explain(&self, refusal: String) -> String {
        let named = named_flags(&refusal);
        if let Some((path, keys)) = &self.file {
            let lines: Vec<String> = (named.iter())
                .filter_map(|f| keys.get(*f).map(|l| l.to_string()))
                .collect();
            if let Some((last, first)) = lines.split_last() {
                let at = match first {
                    [] => format!("line {last}"),
                    _ => format!("lines {} and {last}", first.join(", ")),
                };
                return format!("config file {} ({at}): {refusal}", path.display());
            }
        }
        match &self.taken {
            Some(t)
                if named
                    .iter()
                    .any(|f| t.split_whitespace().any(|w| w == format!("--{f}"))) =>
            {
                format!("{refusal}{TAKEN_FIX}")
            }
            _ => refusal,
        }
    }
}

/// The settings `args` gives, by their flags' names (`lr`, `batch-per-replica`): an option
/// set (a switch given `=false` too), a plain switch (`--headless`) given.
pub(super) fn given(args: &TrainArgs) -> Result<impl Fn(&str) -> bool, String> {
    // (paths as a mark of their own: they need not be text)
    let mark = |p: &Option<PathBuf>| p.as_ref().map(|_| PathBuf::from("given"));
    let probe = TrainArgs {
        config: Vec::new(),
        metrics_out: mark(&args.metrics_out),
        // (`--tensorboard` without a folder is given too, though it is written as null)
        tensorboard: (args.tensorboard.as_ref()).map(|_| Some("given".into())),
        run_dir: mark(&args.run_dir),
        checkpoint_dir: mark(&args.checkpoint_dir),
        init: mark(&args.init),
        export: mark(&args.export),
        resume: mark(&args.resume),
        ..args.clone()
    };
    let set = serde_json::to_value(&probe).map_err(|e| e.to_string())?;
    Ok(move |k: &str| !matches!(set.get(k), None | Some(Value::Null)))
}

/// The flags a refusal is about: those its problem names (before its first `: ` or `; `, the
/// fix after it may name others), each once, without the `--`.
fn named_flags(refusal: &str) -> Vec<&str> {
    let problem = refusal.split(": ").next().unwrap_or(refusal);
    let problem = problem.split("; ").next().unwrap_or(problem);
    let mut named: Vec<&str> = Vec::new();
    let flags = (problem.split_whitespace())
        .filter_map(|w| w.strip_prefix("--"))
        .map(|w| w.trim_end_matches(|c: char| !(c.is_ascii_alphanumeric() || c == '-')))
        .filter(|w| !w.is_empty());
    for f in flags {
        if !named.contains(&f) {
            named.push(f);
        }
    }
    named
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_flags_of_its_problem_not_of_its_fix() {
        assert_eq!(
            named_flags("--lr -1 is invalid: use a positive number"),
            ["lr"]
        );
        assert_eq!(
            named_flags("--prefetch `x`: use a number or auto"),
            ["prefetch"]
        );
        assert_eq!(
            named_flags("--devices cpu:4 with --threads-per-worker 600 asks for 2400 threads; at most 1024 in all: fewer --devices"),
            ["devices", "threads-per-worker"]
        );
        assert_eq!(named_flags("--freeze: no parameter"), ["freeze"]);
        assert!(named_flags("cannot read the data").is_empty());
        // a fix after `; ` is not the problem, and a flag named twice is one
        assert_eq!(
            named_flags("--devices 0 asks for GPUs but none was found; use --devices auto"),
            ["devices"]
        );
    }

    #[test]
    fn a_setting_from_the_file_is_named_there_and_one_from_a_flag_is_not() {
        let flags = TrainArgs {
            momentum: Some(2.0),
            ..TrainArgs::default()
        };
        let mut origins = Origins::default();
        // (the key's own line, not one inside a string before it)
        let text = "epochs = 3\nname = \"\"\"\nlr = 1\n[x]\"\"\"\nmomentum = 0.5\n'lr' = -1\n";
        origins.file(Path::new("run.toml"), text, &flags);
        assert_eq!(
            origins.explain("--lr -1 is invalid: use 1e-3".into()),
            "config file run.toml (line 6): --lr -1 is invalid: use 1e-3"
        );
        // the flag gave it: the file is not to blame
        let momentum = "--momentum 2 is out of range: use 0 to 1";
        assert_eq!(origins.explain(momentum.into()), momentum);
        assert_eq!(
            origins.explain("--epochs 3 with --lr -1: no".into()),
            "config file run.toml (lines 1 and 6): --epochs 3 with --lr -1: no"
        );
        // the start-up line: what the file gave, and what flags gave over it
        assert_eq!(
            origins.config_note().unwrap(),
            "config file run.toml: epochs, lr, name (given over it: --momentum)"
        );
        // the budget is one setting: --steps replaces the file's epochs
        let flags = TrainArgs {
            steps: Some(4),
            ..TrainArgs::default()
        };
        let mut origins = Origins::default();
        // (a checkpoint's refusal names the model the file set, not one a flag gave)
        let text = "model = \"mlp:8\"\ndata = \"digits\"\nepochs = 3\n";
        origins.file(Path::new("c.toml"), text, &flags);
        assert_eq!(
            origins
                .set_by_file(&["model", "data", "image-size"])
                .unwrap(),
            "; this run's --model and --data are set by config file c.toml (lines 1 and 2)"
        );
        assert!(origins.set_by_file(&["image-size"]).is_none());
        origins.file(Path::new("c.toml"), "epochs = 3\nseed = 2\n", &flags);
        assert_eq!(
            origins.config_note().unwrap(),
            "config file c.toml: seed (given over it: --steps)"
        );
        // a switch given without its folder is given over the file's too
        let flags = TrainArgs {
            tensorboard: Some(None),
            ..TrainArgs::default()
        };
        let mut origins = Origins::default();
        origins.file(
            Path::new("run.toml"),
            "tensorboard = false\nsteps = 3\n",
            &flags,
        );
        assert_eq!(
            origins.config_note().unwrap(),
            "config file run.toml: steps (given over it: --tensorboard)"
        );
        // a plain switch the flags did not give is the file's; one they gave is theirs
        for (headless, note) in [
            (None, "config file run.toml: headless, steps"),
            (
                Some(true),
                "config file run.toml: steps (given over it: --headless)",
            ),
            (
                Some(false),
                "config file run.toml: steps (given over it: --headless)",
            ),
        ] {
            let flags = TrainArgs {
                headless,
                ..TrainArgs::default()
            };
            let mut origins = Origins::default();
            origins.file(
                Path::new("run.toml"),
                "headless = true\nsteps = 3\n",
                &flags,
            );
            assert_eq!(origins.config_note().unwrap(), note);
        }
    }

    #[test]
    fn a_setting_from_the_checkpoint_says_so() {
        let origins = Origins {
            taken: Some("--schedule cosine --freeze conv1".into()),
            ..Origins::default()
        };
        assert!(origins
            .explain("--freeze conv1: no parameter".into())
            .ends_with("not given here: give the flag to replace it)"));
        assert_eq!(origins.explain("--lr 0: no".into()), "--lr 0: no");
    }
}
